"""cmstoken-admin as a user runs it: the console script in a subprocess, against moto's server
(through AWS_ENDPOINT_URL), with the region from the environment as the AWS CLI takes it."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

ADMIN = Path(sys.executable).parent / "cmstoken-admin"


def run_admin(*argv: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(ADMIN), *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        stdin=subprocess.DEVNULL,
        check=False,
    )


@pytest.fixture
def aws_env(moto_server: str, tmp_path: Path) -> dict[str, str]:
    """Credentials and moto's endpoint, no region, no AWS configuration files."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("AWS_") or key == "AWS_ENDPOINT_URL"
    }
    env.update(
        AWS_ACCESS_KEY_ID="testing",
        AWS_SECRET_ACCESS_KEY="testing",
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    return env


def test_aws_region_is_honoured_and_stack_may_follow_the_command(aws_env: dict[str, str]) -> None:
    result = run_admin("status", "--stack", "nope", env={**aws_env, "AWS_REGION": "eu-west-1"})
    assert result.returncode == 1
    assert "stack 'nope' not found in this account and region" in result.stderr


def test_no_region_says_what_works(aws_env: dict[str, str]) -> None:
    result = run_admin("--stack", "nope", "status", env=aws_env)
    assert result.returncode == 1
    assert "pass --region, set AWS_REGION (or AWS_DEFAULT_REGION)" in result.stderr


def test_a_missing_stack_option_is_a_usage_error(aws_env: dict[str, str]) -> None:
    result = run_admin("status", env=aws_env)
    assert result.returncode == 2
    assert "--stack" in result.stderr


def test_every_bootstrap_flag_has_help_text(aws_env: dict[str, str]) -> None:
    result = run_admin("bootstrap", "--help", env=aws_env)
    assert result.returncode == 0
    text = result.stdout
    for flag in (
        "--stack",
        "--region",
        "--free-trial",
        "--no-free-trial",
        "--no-qr",
        "--new-identity",
    ):
        entry = re.search(rf"^  {flag}\b[^\n]*(\n {{6,}}[^\n]+)*", text, re.M)
        assert entry is not None, flag
        described = entry.group(0)[len(f"  {flag}") :].strip()
        assert len(described.split()) >= 3, f"{flag} has no help text: {entry.group(0)!r}"
