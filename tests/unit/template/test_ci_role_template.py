"""ci-role.yaml's trust policy, held to the claims GitHub and GitLab document for their OIDC
tokens, through the policy evaluator of tests/iam_evaluation.py: the token of the one
repository and branch (or GitHub environment) the role names is let in; a pull request's,
a tag's, another branch's, another repository's and a fork's are refused.

GitHub, "OpenID Connect reference" (docs.github.com/en/actions/reference/security/oidc),
"Example subject claims":

- "The subject claim includes the environment name when the job references an environment."
  "Syntax: ``repo:ORG-NAME/REPO-NAME:environment:ENVIRONMENT-NAME``"
- "Syntax: ``repo:ORG-NAME/REPO-NAME:pull_request``" (a workflow triggered by a pull request
  event, with no environment)
- "The subject claim includes the branch name of the workflow, but only if the job doesn't
  reference an environment, and if the workflow is not triggered by a pull request event."
  "Syntax: ``repo:ORG-NAME/REPO-NAME:ref:refs/heads/BRANCH-NAME``"
- "Syntax: ``repo:ORG-NAME/REPO-NAME:ref:refs/tags/TAG-NAME``"
- Immutable subject claims, the same reference: "To help prevent this scenario, repositories
  created after July 15, 2026 now use an immutable default subject format that includes both
  the owner ID and repository ID." "Syntax: ``repo:OWNER@OWNER-ID/REPO@REPO-ID:ref:refs/heads/
  BRANCH``"; "Repositories created before July 15, 2026 keep the previous format unless you opt
  in to immutable subject claims" (and the changelog of 2026-04-23, "Immutable subject claims
  for GitHub Actions OIDC tokens": renames and transfers since then adopt it too).
- ``aud``: "By default, this is the URL of the repository owner"; "Configuring OpenID Connect in
  Amazon Web Services": for the audience "Use ``sts.amazonaws.com`` if you are using the
  official action", with the trust condition ``"StringEquals": {"token.actions.
  githubusercontent.com:aud": "sts.amazonaws.com", "token.actions.githubusercontent.com:sub":
  "repo:octo-org/octo-repo:ref:refs/heads/octo-branch"}``.

A fork's pull request runs in the base repository with the ``pull_request`` subject; a
workflow run in the fork itself carries the fork's owner.

GitLab, "OpenID Connect (OIDC) Authentication Using ID Tokens" (docs.gitlab.com/ci/secrets/
id_token_authentication), "Token payload": "``sub``: ``project_path:{group}/{project}:ref_type:
{type}:ref:{branch_name}``"; "``aud``: Intended audience for the token ... Specified in the ID
tokens configuration." "Configure OpenID Connect in AWS to retrieve temporary credentials"
(docs.gitlab.com/ci/cloud_services/aws): Provider URL and Audience "The address of your GitLab
instance, such as https://gitlab.com", and the condition ``"StringEquals": {"gitlab.example.com:
sub": "project_path:mygroup/myproject:ref_type:branch:ref:main"}``. A fork's pipelines run in
the fork's own project (its own ``project_path``); a tag's token has ``ref_type:tag``.
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

import ci_role_template as ci
import template_model
from deployment import constraint_problem

GITHUB_BRANCH = "repo:octo-org/octo-repo:ref:refs/heads/main"
GITHUB_REFUSED = {
    "another branch": "repo:octo-org/octo-repo:ref:refs/heads/feature",
    "a tag named like the branch": "repo:octo-org/octo-repo:ref:refs/tags/main",
    "a pull request": "repo:octo-org/octo-repo:pull_request",
    "an environment": "repo:octo-org/octo-repo:environment:production",
    "another repository of the owner": "repo:octo-org/other-repo:ref:refs/heads/main",
    "a repository whose name begins alike": "repo:octo-org/octo-repo-tools:ref:refs/heads/main",
    "a fork's own run": "repo:someone/octo-repo:ref:refs/heads/main",
    "another owner's branch named alike": "repo:octo-org-evil/octo-repo:ref:refs/heads/main",
    "the immutable form": "repo:octo-org@123456/octo-repo@456789:ref:refs/heads/main",
}
GITLAB_BRANCH = "project_path:mygroup/myproject:ref_type:branch:ref:main"
GITLAB_REFUSED = {
    "another branch (a merge request's source)": (
        "project_path:mygroup/myproject:ref_type:branch:ref:feature"
    ),
    "a tag named like the branch": "project_path:mygroup/myproject:ref_type:tag:ref:main",
    "a fork": "project_path:forker/myproject:ref_type:branch:ref:main",
    "another project of the group": "project_path:mygroup/other:ref_type:branch:ref:main",
    "a subgroup's project": "project_path:mygroup/myproject/sub:ref_type:branch:ref:main",
}


def test_the_github_branch_role_lets_in_its_branch_only() -> None:
    policy = ci.trust_policy(ci.parameters("github"))
    assert ci.assumes(policy, "github", GITHUB_BRANCH)
    for case, sub in GITHUB_REFUSED.items():
        assert not ci.assumes(policy, "github", sub), case
    # the owner's URL, GitHub's default audience, is not the one configure-aws-credentials asks for
    assert not ci.assumes(policy, "github", GITHUB_BRANCH, aud="https://github.com/octo-org")
    # a token of the other issuer, with the same subject, is not GitHub's
    assert not ci.assumes(policy, "gitlab", GITHUB_BRANCH, aud="sts.amazonaws.com")


def test_the_github_environment_role_lets_in_its_environment_only() -> None:
    policy = ci.trust_policy(ci.parameters("github", GitHubEnvironment="production"))
    assert ci.assumes(policy, "github", "repo:octo-org/octo-repo:environment:production")
    for sub in (
        GITHUB_BRANCH,
        "repo:octo-org/octo-repo:environment:staging",
        "repo:octo-org/octo-repo:pull_request",
        "repo:someone/octo-repo:environment:production",
    ):
        assert not ci.assumes(policy, "github", sub), sub


def test_a_repository_with_immutable_ids_is_named_by_them() -> None:
    values = ci.parameters("github", Repository="octo-org@123456/octo-repo@456789")
    policy = ci.trust_policy(values)
    assert ci.assumes(policy, "github", "repo:octo-org@123456/octo-repo@456789:ref:refs/heads/main")
    for sub in (
        GITHUB_BRANCH,  # the name form, which such a repository no longer gets
        "repo:octo-org@123456/octo-repo@999999:ref:refs/heads/main",  # a re-created name
        "repo:octo-org@654321/octo-repo@456789:ref:refs/heads/main",
    ):
        assert not ci.assumes(policy, "github", sub), sub


def test_the_gitlab_role_lets_in_its_project_and_branch_only() -> None:
    policy = ci.trust_policy(ci.parameters("gitlab"))
    assert ci.assumes(policy, "gitlab", GITLAB_BRANCH)
    for case, sub in GITLAB_REFUSED.items():
        assert not ci.assumes(policy, "gitlab", sub), case
    assert not ci.assumes(policy, "gitlab", GITLAB_BRANCH, aud="https://example.com")
    assert not ci.assumes(policy, "github", GITLAB_BRANCH, aud="https://gitlab.com")


def test_a_gitlab_subgroup_project_and_another_audience() -> None:
    values = ci.parameters(
        "gitlab", Repository="mygroup/platform/myproject", GitLabAudience="https://cms.example.com"
    )
    policy = ci.trust_policy(values)
    sub = "project_path:mygroup/platform/myproject:ref_type:branch:ref:main"
    assert ci.assumes(policy, "gitlab", sub, aud="https://cms.example.com")
    assert not ci.assumes(policy, "gitlab", sub, aud="https://gitlab.com")


def test_the_trust_policy_names_the_provider_and_compares_whole_claims() -> None:
    """One statement, for the issuer's provider (created by the stack, or the account's), and
    only StringEquals: no wildcard can widen it."""
    for provider, create in (("github", "true"), ("gitlab", "false")):
        policy = ci.trust_policy(ci.parameters(provider, CreateOidcProvider=create))
        (statement,) = policy["Statement"]
        assert statement["Principal"] == {"Federated": ci.provider_arn(provider)}
        assert statement["Action"] == "sts:AssumeRoleWithWebIdentity"
        assert list(statement["Condition"]) == ["StringEquals"]
        host = ci.HOSTS[provider]
        assert set(statement["Condition"]["StringEquals"]) == {f"{host}:sub", f"{host}:aud"}


def widened(policy: dict[str, Any], key: str, pattern: str) -> dict[str, Any]:
    wide = copy.deepcopy(policy)
    condition = wide["Statement"][0]["Condition"]
    del condition["StringEquals"][key]
    condition["StringLike"] = {key: pattern}
    return wide


@pytest.mark.parametrize(
    ("pattern", "now_allowed"),
    [
        ("repo:octo-org/*", "another repository of the owner"),
        ("repo:octo-org/octo-repo*", "a repository whose name begins alike"),
        ("repo:octo-org/octo-repo:*", "a pull request"),
        ("repo:*/octo-repo:ref:refs/heads/main", "a fork's own run"),
        ("repo:octo-org/octo-repo:ref:refs/*/main", "a tag named like the branch"),
    ],
)
def test_the_evaluator_lets_in_what_a_widened_condition_would(
    pattern: str, now_allowed: str
) -> None:
    """The control for the tests above: with the subject widened to a StringLike pattern, the
    token they refuse gets in, so they would fail on such a policy."""
    policy = ci.trust_policy(ci.parameters("github"))
    wide = widened(policy, "token.actions.githubusercontent.com:sub", pattern)
    assert ci.assumes(wide, "github", GITHUB_BRANCH)
    assert ci.assumes(wide, "github", GITHUB_REFUSED[now_allowed])


@pytest.mark.parametrize(
    ("parameter", "value"),
    [
        ("Repository", "octo-org/*"),
        ("Repository", "octo-org/octo-repo:*"),
        ("Repository", "octo-org"),
        ("Repository", "${aws:username}/octo-repo"),
        ("Branch", "*"),
        ("Branch", "release/*"),
        ("Branch", "main:pull_request"),
        ("GitHubEnvironment", "prod*"),
        ("GitHubEnvironment", "Production:V1"),
        ("GitLabAudience", "https://*.gitlab.com"),
        ("ConsumerPolicyArn", "arn:aws:iam::aws:policy/AdministratorAccess"),
    ],
)
def test_a_parameter_that_would_widen_the_role_is_refused(parameter: str, value: str) -> None:
    """CloudFormation refuses these values before anything is created: wildcards, colons (the
    subject's separator; GitHub escapes a colon in an environment name as %3A), policy
    variables, and an AWS managed policy in place of the stack's."""
    declaration = ci.template()["Parameters"][parameter]
    assert constraint_problem(declaration, value) is not None


def test_the_documented_names_are_accepted() -> None:
    declarations = ci.template()["Parameters"]
    for parameter, value in (
        ("Repository", "octo-org/octo-repo"),
        ("Repository", "octo-org@123456/octo-repo@456789"),
        ("Repository", "mygroup/platform/myproject"),
        ("Branch", "release/2026.11"),
        ("GitHubEnvironment", "production"),
        ("GitHubEnvironment", ""),
        ("RefreshRequestPolicyArn", ""),
    ):
        assert constraint_problem(declarations[parameter], value) is None, (parameter, value)


def test_an_environment_with_gitlab_is_refused_before_any_resource() -> None:
    values = ci.parameters("gitlab", GitHubEnvironment="production")
    (refusal,) = template_model.refusals(values, ci.template())
    assert refusal.startswith("GitHubEnvironment applies to GitHub only")
    assert template_model.refusals(ci.parameters("gitlab"), ci.template()) == []


@pytest.mark.parametrize("provider", ["github", "gitlab"])
def test_the_provider_is_the_issuers_with_the_audience_asked_for(provider: str) -> None:
    values = ci.parameters(provider)
    resolved = ci.resolver(values)
    (provider_resource,) = resolved.resources("AWS::IAM::OIDCProvider").values()
    properties = resolved.resolve(provider_resource["Properties"])
    assert properties == {
        "Url": f"https://{ci.HOSTS[provider]}",
        "ClientIdList": [ci.AUDIENCES[provider]],
    }
    existing = ci.resolver(ci.parameters(provider, CreateOidcProvider="false"))
    assert existing.resources("AWS::IAM::OIDCProvider") == {}


def test_the_role_gets_the_stacks_consumer_policies_and_nothing_else() -> None:
    both = ci.role_properties(ci.parameters("github"))
    assert both["ManagedPolicyArns"] == [ci.CONSUMER_POLICY_ARN, ci.REFRESH_POLICY_ARN]
    assert "Policies" not in both
    member = ci.role_properties(ci.parameters("github", RefreshRequestPolicyArn=""))
    assert member["ManagedPolicyArns"] == [ci.CONSUMER_POLICY_ARN]
    assert both["MaxSessionDuration"] == 3600
