"""One version, shown everywhere, and the release metadata a user or the Serverless Application
Repository reads."""

from __future__ import annotations

import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

import cmstoken
from template_model import source

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
SEMVER = re.compile(r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")


def test_the_version_is_semantic_and_the_package_metadata_agrees() -> None:
    assert SEMVER.match(cmstoken.__version__)
    assert importlib.metadata.version("cmstoken") == cmstoken.__version__


def test_the_template_states_the_same_version() -> None:
    template = source()
    application = template["Metadata"]["AWS::ServerlessRepo::Application"]
    assert application["SemanticVersion"] == cmstoken.__version__
    assert str(template["Outputs"]["Version"]["Value"]) == cmstoken.__version__


@pytest.mark.parametrize("script", ["get-token", "cmstoken-admin", "cms-emulator"])
def test_every_console_script_prints_the_version(script: str) -> None:
    result = subprocess.run(
        [str(BIN / script), "--version"], capture_output=True, text=True, timeout=30, check=True
    )
    assert result.stdout.strip() == f"{script} {cmstoken.__version__}"


def test_the_changelog_keeps_a_changelog_and_names_the_version() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert "Keep a Changelog" in text
    assert "## [Unreleased]" in text
    releases = re.findall(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", text, re.M)
    assert releases
    assert cmstoken.__version__ in releases


def test_the_serverless_application_repository_metadata_is_complete() -> None:
    """The fields `sam publish` reads (AWS SAM Developer Guide, "Publishing serverless
    applications using the AWS SAM CLI"): name, description, author, SPDX license id with the
    license and readme files, labels, semantic version."""
    application = source()["Metadata"]["AWS::ServerlessRepo::Application"]
    for field in ("Name", "Description", "Author", "SpdxLicenseId", "LicenseUrl", "ReadmeUrl"):
        assert application[field], field
    assert application["SpdxLicenseId"] == "Apache-2.0"
    assert (ROOT / application["LicenseUrl"]).is_file()
    assert (ROOT / application["ReadmeUrl"]).is_file()
    assert "Apache License" in (ROOT / "LICENSE").read_text()
    assert importlib.metadata.metadata("cmstoken")["License-Expression"] == "Apache-2.0"
    assert 1 <= len(application["Labels"]) <= 10
    for label in application["Labels"]:
        assert re.fullmatch(r"[a-zA-Z0-9+\-_:/@]{1,127}", label), label


def test_every_parameter_says_what_it_takes() -> None:
    """A console user sees each parameter's description and the constraint message when a
    value is refused."""
    for name, parameter in source()["Parameters"].items():
        assert parameter.get("Description"), name
        if parameter["Type"] == "Number":
            bounded = "AllowedValues" in parameter or {"MinValue", "MaxValue"} <= set(parameter)
            assert bounded, name
        else:
            assert "AllowedValues" in parameter or "AllowedPattern" in parameter, name
        assert parameter.get("ConstraintDescription"), name


def test_a_cold_start_logs_the_version_once_and_metric_documents_carry_it() -> None:
    probe = (
        "import json, sys\n"
        "from cmstoken import observability\n"
        "@observability.metrics.log_metrics\n"
        "def handler(event, context):\n"
        "    observability.tag_version()\n"
        "    observability.metrics.add_metric(name='Probe', unit='Count', value=1)\n"
        "handler({}, None)\n"
        "handler({}, None)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
        env={"POWERTOOLS_SERVICE_NAME": "cmstoken", "POWERTOOLS_METRICS_NAMESPACE": "CmsToken/x"},
    )
    lines = [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]
    cold = [line for line in lines if line.get("message") == "cold start"]
    assert [line["version"] for line in cold] == [cmstoken.__version__]
    documents = [line for line in lines if "_aws" in line]
    assert len(documents) == 2
    for document in documents:
        assert document["version"] == cmstoken.__version__
        # metadata, not a dimension: the alarms' dimension set stays [["service"]]
        assert document["_aws"]["CloudWatchMetrics"][0]["Dimensions"] == [["service"]]
