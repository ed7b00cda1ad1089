"""docs/consume.md: "the AWS CLI takes ``AWS_ENDPOINT_URL`` from the environment (v1.29, v2.13
and later)", which is how its recipe reaches the local stack.

The AWS CLI's changelog, at 1.29.0 and at 2.13.0: "feature:configuration: Configure the
endpoint URL in the shared configuration file or via an environment variable for a specific
AWS service or all AWS services" (botocore 1.31.0, which AWS CLI 1.29.0 bundles, and boto3
1.28.0 carry the same entry). The document's versions are held to those, and the AWS CLI on
this machine, which must be one of them, is run with ``AWS_ENDPOINT_URL`` alone against a
server on 127.0.0.1: its request arrives there."""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from eventbridge_stub import StubAws, serving

pytestmark = pytest.mark.integration

ROOT = Path(__file__).resolve().parents[2]
# The first release of each major version that reads AWS_ENDPOINT_URL (the changelog above).
FIRST = {1: (1, 29), 2: (2, 13)}


def test_the_documented_versions_are_the_changelogs() -> None:
    text = " ".join((ROOT / "docs" / "consume.md").read_text().split())
    claim = re.search(r"environment \(v(\d+)\.(\d+), v(\d+)\.(\d+) and later\)", text)
    assert claim is not None
    found = [int(part) for part in claim.groups()]
    assert {found[0]: (found[0], found[1]), found[2]: (found[2], found[3])} == FIRST


@pytest.fixture
def server() -> Iterator[StubAws]:
    """Answers an empty ``ListSecrets``, keeping each request's ``X-Amz-Target``."""
    with serving(StubAws({"SecretList": []})) as stub:
        yield stub


@pytest.mark.skipif(shutil.which("aws") is None, reason="needs the AWS CLI")
def test_the_aws_cli_here_reads_aws_endpoint_url(server: StubAws, tmp_path: Path) -> None:
    shown = subprocess.run(["aws", "--version"], capture_output=True, text=True, check=True)
    release = re.search(r"aws-cli/(\d+)\.(\d+)", shown.stdout + shown.stderr)
    assert release is not None
    major, minor = int(release.group(1)), int(release.group(2))
    assert (major, minor) >= FIRST[major], shown.stdout
    ran = subprocess.run(
        ["aws", "secretsmanager", "list-secrets"],
        env={
            "PATH": str(Path(shutil.which("aws") or "aws").parent) + ":/usr/bin:/bin",
            "HOME": str(tmp_path),
            "AWS_ENDPOINT_URL": server.url,
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_ACCESS_KEY_ID": "local",
            "AWS_SECRET_ACCESS_KEY": "local",
        },
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    assert ran.returncode == 0, ran.stderr
    assert server.targets == ["secretsmanager.ListSecrets"]
