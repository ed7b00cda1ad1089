"""scripts/sar_urls.py, the packaged template's HomePageUrl and SourceCodeUrl (no sockets): which
URLs it takes, the https address it derives from the origin remote, and what it writes into a
template written with short-form intrinsic functions. `make package` runs it (see
tests/integration/test_package.py)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from samcli.yamlhelper import yaml_parse  # type: ignore[import-untyped]

from sar_urls import (
    METADATA,
    UrlError,
    Urls,
    UsageError,
    apply,
    https_url_from_remote,
    main,
    origin_remote,
    resolve,
    validate_url,
)
from template_model import source
from yaml_state import safe_loader_restored

ROOT = Path(__file__).resolve().parents[3]

URL = "https://example.org/acme/cmstoken"


@pytest.fixture(autouse=True)
def _safe_loader_restored() -> Iterator[None]:
    """The SAM CLI's YAML parsers change PyYAML's SafeLoader for the process (see yaml_state)."""
    with safe_loader_restored():
        yield


@pytest.mark.parametrize(
    ("remote", "expected"),
    [
        ("git@github.com:acme/cmstoken.git", "https://github.com/acme/cmstoken"),
        ("git@github.com:acme/cmstoken", "https://github.com/acme/cmstoken"),
        ("github.com:acme/cmstoken.git/", "https://github.com/acme/cmstoken"),
        (
            "git@GitLab.Example.org:group/sub/cmstoken.git",
            "https://gitlab.example.org/group/sub/cmstoken",
        ),
        ("https://github.com/acme/cmstoken.git", "https://github.com/acme/cmstoken"),
        ("https://github.com/acme/cmstoken/", "https://github.com/acme/cmstoken"),
        ("https://bob:s3cret@github.com/acme/cmstoken.git", "https://github.com/acme/cmstoken"),
        ("https://ghp_token@github.com/acme/cmstoken", "https://github.com/acme/cmstoken"),
        (
            "https://git.example.org:8443/acme/cmstoken.git",
            "https://git.example.org:8443/acme/cmstoken",
        ),
        (
            "ssh://git@git.example.org:2222/acme/cmstoken.git",
            "https://git.example.org/acme/cmstoken",
        ),
        ("  git@github.com:acme/cmstoken.git\n", "https://github.com/acme/cmstoken"),
    ],
)
def test_a_github_or_gitlab_remote_becomes_its_https_address(remote: str, expected: str) -> None:
    assert https_url_from_remote(remote) == expected


@pytest.mark.parametrize(
    "remote",
    [
        "http://github.com/acme/cmstoken.git",  # upgrading to https would be a guess
        "git://github.com/acme/cmstoken.git",
        "file:///srv/git/cmstoken.git",
        "/srv/git/cmstoken.git",
        "../cmstoken",
        "git@github.com:cmstoken.git",  # no owner
        "https://github.com/cmstoken",
        "https://github.com/acme/cmstoken?ref=main",
        "https://gith ub.com/acme/cmstoken",
        "",
    ],
)
def test_other_remotes_give_no_address(remote: str) -> None:
    assert https_url_from_remote(remote) is None


@pytest.mark.parametrize(
    "url",
    [URL, "https://example.org", "https://git.example.org:8443/a/b", "https://h/a%20b/~c-d_e.f"],
)
def test_https_addresses_with_a_host_are_taken(url: str) -> None:
    assert validate_url(url) == url


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://example.org/acme/cmstoken", "https://"),
        ("HTTPS://example.org/acme/cmstoken", "https://"),
        ("example.org/acme/cmstoken", "https://"),
        ("https://", "no host"),
        ("https:///acme/cmstoken", "no host"),
        ("https://bob:s3cret@example.org/acme", "credentials"),
        ("https://token@example.org/acme", "credentials"),
        ("https://example.org/acme cmstoken", "whitespace"),
        (" https://example.org/acme", "whitespace"),
        ("https://example.org/acme\tx", "whitespace"),
        ("https://example.org/acme/\u00e9", "non-ASCII"),
        ("https://example.org/acme?tab=readme", "query"),
        ("https://example.org/acme?", "query"),
        ("https://example.org/acme#readme", "fragment"),
        ("https://exa_mple.org/acme", "host"),
        ("https://example.org:http/acme", "port"),
        ("https://example.org:/acme", "port"),
        ("https://example.org/a<b>", "path"),
        ("https://example.org/a%zz", "path"),
    ],
)
def test_addresses_sar_would_refuse_are_not(url: str, reason: str) -> None:
    with pytest.raises(UrlError, match=reason):
        validate_url(url)


def test_the_home_page_defaults_to_the_source_and_the_source_to_the_remote() -> None:
    assert resolve(URL, None, None) == Urls(URL, URL)
    assert resolve(URL, "", None) == Urls(URL, URL)
    assert resolve(URL, f"{URL}/docs", None) == Urls(URL, f"{URL}/docs")
    github = "https://github.com/acme/cmstoken"
    assert resolve(None, None, "git@github.com:acme/cmstoken.git") == Urls(github, github)
    assert resolve("", f"{URL}/docs", "git@github.com:acme/cmstoken.git") == Urls(
        github, f"{URL}/docs"
    )


def test_without_a_source_the_fields_stay_out_and_the_reason_is_kept() -> None:
    none = resolve(None, None, None)
    assert (none.source_code_url, none.home_page_url) == (None, None)
    assert none.missing_source == "no SOURCE_URL and no origin remote"
    local = resolve(None, None, "/srv/git/cmstoken.git")
    assert local.source_code_url is None
    assert local.missing_source is not None
    assert "origin remote is not" in local.missing_source


@pytest.mark.parametrize("variable", ["SOURCE_URL", "HOME_PAGE_URL"])
def test_a_bad_value_is_refused_naming_the_variable_without_echoing_it(variable: str) -> None:
    bad = "https://bob:s3cret@example.org/acme/cmstoken"
    values = {"SOURCE_URL": URL, "HOME_PAGE_URL": None, variable: bad}
    with pytest.raises(UsageError) as raised:
        resolve(values["SOURCE_URL"], values["HOME_PAGE_URL"], None)
    message = str(raised.value)
    assert message.startswith(f"make package: {variable} must be an https:// URL")
    assert "credentials" in message
    assert "s3cret" not in message
    assert "\n" not in message


def test_check_exits_2_with_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["check", "--source-url", "http://example.org/acme/cmstoken"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("make package: SOURCE_URL must be")
    assert main(["check", "--source-url", URL]) == 0


SHORT_FORM = """\
AWSTemplateFormatVersion: "2010-09-09"
Transform: AWS::Serverless-2016-10-31
Metadata:
  AWS::ServerlessRepo::Application:
    Name: cmstoken
    Author: cmstoken maintainers
    SpdxLicenseId: Apache-2.0
    SemanticVersion: "0.1.0"
Resources:
  Queue:
    Type: AWS::SQS::Queue
    Properties:
      QueueName: !Sub "${AWS::StackName}-queue"
      Tags:
        - Key: arn
          Value: !GetAtt Topic.TopicArn
        - Key: ref
          Value: !Ref Topic
        - Key: joined
          Value: !Join ["-", [!Ref "AWS::Region", "x"]]
  Topic:
    Type: AWS::SNS::Topic
"""


def test_apply_writes_both_fields_and_keeps_intrinsic_functions(tmp_path: Path) -> None:
    template = tmp_path / "packaged.yaml"
    template.write_text(SHORT_FORM)
    template.chmod(0o644)
    assert apply(template, Urls(URL, f"{URL}/docs")) is None
    assert template.stat().st_mode & 0o777 == 0o644
    written = yaml_parse(template.read_text())
    metadata = written["Metadata"][METADATA]
    assert metadata["SourceCodeUrl"] == URL
    assert metadata["HomePageUrl"] == f"{URL}/docs"
    assert list(metadata)[:4] == ["Name", "Author", "SpdxLicenseId", "SemanticVersion"]
    original = yaml_parse(SHORT_FORM)
    del metadata["SourceCodeUrl"], metadata["HomePageUrl"]
    assert written == original
    tags = written["Resources"]["Queue"]["Properties"]["Tags"]
    assert [tag["Value"] for tag in tags] == [
        {"Fn::GetAtt": ["Topic", "TopicArn"]},
        {"Ref": "Topic"},
        {"Fn::Join": ["-", [{"Ref": "AWS::Region"}, "x"]]},
    ]
    assert written["Resources"]["Queue"]["Properties"]["QueueName"] == {
        "Fn::Sub": "${AWS::StackName}-queue"
    }
    assert list(tmp_path.iterdir()) == [template]  # no temporary file left behind


def test_apply_without_a_source_leaves_the_fields_out_and_says_why(tmp_path: Path) -> None:
    template = tmp_path / "packaged.yaml"
    template.write_text(SHORT_FORM)
    note = apply(template, resolve(None, None, None))
    metadata = yaml_parse(template.read_text())["Metadata"][METADATA]
    assert "SourceCodeUrl" not in metadata
    assert "HomePageUrl" not in metadata
    assert note is not None
    assert "\n" not in note
    assert "privately" in note
    assert "Serverless Application Repository" in note
    assert "SourceCodeUrl" in note
    assert "Apache-2.0" in note
    assert "SOURCE_URL=https://" in note


def git(*arguments: str) -> None:
    subprocess.run(["git", *arguments], check=True, capture_output=True, timeout=30)


def test_the_default_source_is_the_origin_remote(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for name in ("GIT_DIR", "GIT_WORK_TREE", "SOURCE_URL", "HOME_PAGE_URL"):
        monkeypatch.delenv(name, raising=False)
    assert origin_remote(tmp_path) is None  # not a repository
    git("init", "-q", str(tmp_path))
    assert origin_remote(tmp_path) is None  # no origin
    remote = "https://bob:s3cret@github.com/acme/cmstoken.git"
    git("-C", str(tmp_path), "remote", "add", "origin", remote)
    assert origin_remote(tmp_path) == remote
    template = tmp_path / "packaged.yaml"
    template.write_text(SHORT_FORM)
    assert main(["apply", str(template), "--repository", str(tmp_path)]) == 0
    metadata = yaml_parse(template.read_text())["Metadata"][METADATA]
    assert (
        metadata["SourceCodeUrl"] == metadata["HomePageUrl"] == "https://github.com/acme/cmstoken"
    )


def test_template_yaml_leaves_the_publishers_urls_to_packaging() -> None:
    application = source()["Metadata"][METADATA]
    assert "SourceCodeUrl" not in application
    assert "HomePageUrl" not in application
