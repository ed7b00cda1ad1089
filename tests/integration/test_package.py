"""`make package` as a user runs it, against moto's S3 on 127.0.0.1: the build's code is
uploaded, the packaged template names the uploaded objects and validates, and CloudFormation
(moto's) creates a stack from it. Its Serverless Application Repository metadata carries the
publisher's SOURCE_URL and HOME_PAGE_URL, as `sam publish` would send them, and its README, the
one uploaded, links into SOURCE_URL at the packaged commit (the SAR shows it on its own page)."""

from __future__ import annotations

import base64
import fcntl
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import botocore.session
import pytest
import requests
from botocore.validate import validate_parameters
from samcli.vendor.serverlessrepo import publish  # type: ignore[import-untyped]
from samcli.vendor.serverlessrepo.parser import (  # type: ignore[import-untyped]
    get_app_metadata,
    strip_app_metadata,
)
from samcli.yamlhelper import yaml_dump  # type: ignore[import-untyped]
from samtranslator.yaml_helper import yaml_parse

import cmstoken
from deployment import ROOT, Deployer, built_template, sam_transform
from sar_urls import absolute_links, relative_links
from yaml_state import safe_loader_restored

pytestmark = [
    pytest.mark.integration,
    pytest.mark.filterwarnings("ignore:Tried to parse AWS.*:UserWarning"),
]

BUCKET = "cmstoken-releases"
PACKAGED = ROOT / ".aws-sam" / "packaged.yaml"
LOCK = ROOT / ".aws-sam" / "package.lock"
ARTIFACTS = {"AWS::Serverless::Function": "CodeUri", "AWS::Serverless::LayerVersion": "ContentUri"}
SOURCE_URL = "https://example.org/acme/cmstoken"
SAR = "AWS::ServerlessRepo::Application"
README = ROOT / "README.md"
AWS_TESTING = {
    "AWS_ACCESS_KEY_ID": "testing",
    "AWS_SECRET_ACCESS_KEY": "testing",
    "AWS_SESSION_TOKEN": "testing",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@contextmanager
def one_package_at_a_time() -> Iterator[None]:
    """`make package` writes .aws-sam/packaged.yaml (removing it first) and the build's README
    in the checkout, and each test reads what it packaged: a test in another worker waits for
    this one (a lock on a file), before its fixtures package anything."""
    LOCK.parent.mkdir(exist_ok=True)
    with LOCK.open("w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield


@pytest.fixture(autouse=True)
def _one_package_at_a_time() -> Iterator[None]:
    with one_package_at_a_time():
        yield


@pytest.fixture(autouse=True)
def _safe_loader_restored() -> Iterator[None]:
    """The SAM CLI's YAML parsers change PyYAML's SafeLoader for the process (see yaml_state)."""
    with safe_loader_restored():
        yield


def make_package(*arguments: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    # -o build: reuse the build `make test` made (the deploy test checks it is current).
    # The URLs come from the arguments only, not from the environment pytest runs in.
    env = {k: v for k, v in env.items() if k not in {"SOURCE_URL", "HOME_PAGE_URL"}}
    return subprocess.run(
        ["make", "-s", "-o", "build", "package", *arguments],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture
def bucket(moto_server: str) -> str:
    built_template()  # fails, saying to run `make build`, when missing or stale
    boto3.client("s3").create_bucket(Bucket=BUCKET)
    PACKAGED.unlink(missing_ok=True)
    return BUCKET


def package(*arguments: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    """`make package` into the bucket, succeeding; the packaged template."""
    result = make_package(f"BUCKET={BUCKET}", "PREFIX=v1", *arguments, env=env or dict(os.environ))
    assert result.returncode == 0, result.stdout + result.stderr
    return yaml_parse(PACKAGED.read_text())  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Made:
    """What one `make package` made: the packaged template's text, the bucket's objects, and
    the checkout's README before it ran."""

    text: str
    objects: dict[str, bytes]
    readme: bytes

    def dumps(self) -> str:
        objects = {key: base64.b64encode(body).decode() for key, body in self.objects.items()}
        readme = base64.b64encode(self.readme).decode()
        return json.dumps({"text": self.text, "objects": objects, "readme": readme})

    @classmethod
    def loads(cls, text: str) -> Made:
        said = json.loads(text)
        objects = {key: base64.b64decode(body) for key, body in said["objects"].items()}
        return cls(said["text"], objects, base64.b64decode(said["readme"]))


@pytest.fixture(scope="module")
def publishers_package(_moto_endpoint: str, tmp_path_factory: pytest.TempPathFactory) -> Made:
    """`make package` as a publisher runs it, with SOURCE_URL (HOME_PAGE_URL defaulting to it),
    once for the tests that read what it made (it took 6 s each, five times): on an empty moto,
    in the lock; ``packaged`` puts it back for each test. Under pytest-xdist, once for the run:
    the first test process to need it keeps it in the run's temporary folder, which only this
    run's processes share, and the others read it there (in the lock)."""
    shared = None
    if os.environ.get("PYTEST_XDIST_WORKER"):
        shared = tmp_path_factory.getbasetemp().parent / "publishers-package.json"
    with one_package_at_a_time(), pytest.MonkeyPatch.context() as patch:
        if shared is not None and shared.is_file():
            return Made.loads(shared.read_text())
        for name, value in {**AWS_TESTING, "AWS_ENDPOINT_URL": _moto_endpoint}.items():
            patch.setenv(name, value)
        patch.delenv("AWS_PROFILE", raising=False)
        requests.post(f"{_moto_endpoint}/moto-api/reset", timeout=10).raise_for_status()
        built_template()  # fails, saying to run `make build`, when missing or stale
        s3 = boto3.client("s3")
        s3.create_bucket(Bucket=BUCKET)
        PACKAGED.unlink(missing_ok=True)
        readme = README.read_bytes()
        package(f"SOURCE_URL={SOURCE_URL}")
        keys = [o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])]
        objects = {key: s3.get_object(Bucket=BUCKET, Key=key)["Body"].read() for key in keys}
        made = Made(PACKAGED.read_text(), objects, readme)
        requests.post(f"{_moto_endpoint}/moto-api/reset", timeout=10).raise_for_status()
        if shared is not None:
            shared.write_text(made.dumps())
    return made


@pytest.fixture
def packaged(bucket: str, publishers_package: Made) -> dict[str, Any]:
    """The publisher's package, as `make package` left it: the template in
    .aws-sam/packaged.yaml, the build's code in the (empty) bucket."""
    s3 = boto3.client("s3")
    for key, body in publishers_package.objects.items():
        s3.put_object(Bucket=bucket, Key=key, Body=body)
    PACKAGED.write_text(publishers_package.text)
    return yaml_parse(publishers_package.text)  # type: ignore[no-any-return]


def uploaded(url: str) -> bytes:
    """The object an s3:// URL of the packaged template names, from moto's S3."""
    assert url.startswith(f"s3://{BUCKET}/"), url
    key = url.removeprefix(f"s3://{BUCKET}/")
    body: bytes = boto3.client("s3").get_object(Bucket=BUCKET, Key=key)["Body"].read()
    return body


def head_commit() -> str:
    return subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout.strip()


def create_application_request(template_text: str) -> dict[str, Any]:
    """The CreateApplication request `sam publish` would send for this packaged template, built
    offline by the SAM CLI's own code (samcli.vendor.serverlessrepo.publish), with the
    properties SAR needs to share an application publicly checked, and the request checked
    against the service's API model."""
    template = publish._get_template_dict(template_text)
    metadata = get_app_metadata(template)
    metadata.validate(["name", "description", "author", "spdx_license_id", "source_code_url"])
    request: dict[str, Any] = publish._create_application_request(
        metadata, yaml_dump(strip_app_metadata(template))
    )
    model = botocore.session.get_session().get_service_model("serverlessrepo")
    shape = model.operation_model("CreateApplication").input_shape
    assert shape is not None
    validate_parameters(request, shape)  # raises ParamValidationError
    return request


def test_a_bucket_is_required() -> None:
    result = make_package(env=dict(os.environ))
    assert result.returncode != 0
    assert "usage: make package BUCKET=" in result.stderr


def test_the_packaged_template_names_uploaded_objects(packaged: dict[str, Any]) -> None:
    s3 = boto3.client("s3")
    keys = {o["Key"] for o in s3.list_objects_v2(Bucket=BUCKET).get("Contents", [])}
    named = 0
    for name, resource in packaged["Resources"].items():
        prop = ARTIFACTS.get(resource["Type"])
        if prop is None:
            continue
        location = resource["Properties"][prop]
        assert isinstance(location, str), (name, location)
        assert location.startswith(f"s3://{BUCKET}/v1/"), (name, location)
        assert location.removeprefix(f"s3://{BUCKET}/") in keys, (name, location)
        named += 1
    assert named >= 3  # the rotator, the bootstrap, the layer (and the example consumer)
    assert packaged["Metadata"]["AWS::ServerlessRepo::Application"]["SemanticVersion"]


def test_the_packaged_template_validates(packaged: dict[str, Any], tmp_path: Path) -> None:
    env = {**os.environ, "AWS_DEFAULT_REGION": "us-east-1", "SAM_CLI_TELEMETRY": "0"}
    result = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "sam"), "validate", "--lint", "-t", str(PACKAGED)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_cloudformation_creates_a_stack_from_the_packaged_template(
    packaged: dict[str, Any],
) -> None:
    deployer = Deployer(
        clients=lambda service: boto3.client(service),  # type: ignore[call-overload]
        transformed=sam_transform(packaged),
        bucket=BUCKET,
        region=boto3.session.Session().region_name,
        account_id=boto3.client("sts").get_caller_identity()["Account"],
    )
    stack = deployer.deploy("cmstoken-packaged", {"ServiceBaseUrl": "https://cms.example.invalid"})
    assert stack.status == "CREATE_COMPLETE"
    functions = boto3.client("lambda").list_functions()["Functions"]
    assert len([f for f in functions if "cmstoken-packaged" in f["FunctionName"]]) >= 2
    assert stack.outputs["Version"] == packaged["Outputs"]["Version"]["Value"]


def test_the_packaged_metadata_is_what_sam_publish_sends(packaged: dict[str, Any]) -> None:
    request = create_application_request(PACKAGED.read_text())
    assert request["SourceCodeUrl"] == SOURCE_URL
    assert request["HomePageUrl"] == SOURCE_URL
    assert request["SpdxLicenseId"] == "Apache-2.0"
    assert request["SemanticVersion"] == cmstoken.__version__
    assert request["LicenseUrl"].startswith(f"s3://{BUCKET}/v1/")
    assert request["ReadmeUrl"].startswith(f"s3://{BUCKET}/v1/")
    assert SAR not in yaml_parse(request["TemplateBody"]).get("Metadata", {})


def test_the_uploaded_readme_links_into_the_source_at_the_packaged_commit(
    packaged: dict[str, Any], publishers_package: Made
) -> None:
    template, checkout_readme = packaged, publishers_package.readme
    assert README.read_bytes() == checkout_readme  # the checkout's README is left as it is
    commit = head_commit()
    readme = uploaded(template["Metadata"][SAR]["ReadmeUrl"]).decode()
    assert readme == absolute_links(checkout_readme.decode(), SOURCE_URL, commit)
    assert relative_links(readme) == []
    blob = f"{SOURCE_URL}/blob/{commit}"
    for link in ["docs/deploy.md", "docs/operate.md#bootstrap", "CHANGELOG.md", "LICENSE"]:
        assert f"]({blob}/{link})" in readme, link
    assert readme.count(f"]({blob}/") == len(relative_links(checkout_readme.decode())) >= 20
    request = create_application_request(PACKAGED.read_text())
    assert uploaded(request["ReadmeUrl"]).decode() == readme  # what sam publish sends
    assert uploaded(request["LicenseUrl"]) == (ROOT / "LICENSE").read_bytes()


def test_an_explicit_home_page_url_is_kept(bucket: str) -> None:
    template = package(f"SOURCE_URL={SOURCE_URL}", f"HOME_PAGE_URL={SOURCE_URL}/wiki")
    assert template["Metadata"][SAR]["SourceCodeUrl"] == SOURCE_URL
    assert template["Metadata"][SAR]["HomePageUrl"] == f"{SOURCE_URL}/wiki"
    request = create_application_request(PACKAGED.read_text())
    assert request["HomePageUrl"] == f"{SOURCE_URL}/wiki"


def test_without_a_source_url_or_a_remote_the_fields_stay_out(bucket: str, tmp_path: Path) -> None:
    # First the step of a run with SOURCE_URL that rewrites the README in the build (the whole
    # `make package` runs in publishers_package).
    readme_step = [sys.executable, "scripts/sar_urls.py", "readme", ".aws-sam/build/template.yaml"]
    rewrite = {**os.environ, "SOURCE_URL": SOURCE_URL}
    subprocess.run(readme_step, cwd=ROOT, env=rewrite, check=True, capture_output=True, timeout=60)
    assert (ROOT / ".aws-sam" / "build" / "README.md").is_file()
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True, timeout=30)
    # This checkout may have an origin remote; git asked there answers from an empty repository.
    env = {**os.environ, "GIT_DIR": str(tmp_path / ".git")}
    result = make_package(f"BUCKET={BUCKET}", "PREFIX=v1", env=env)
    assert result.returncode == 0, result.stdout + result.stderr
    metadata = yaml_parse(PACKAGED.read_text())["Metadata"][SAR]
    assert "SourceCodeUrl" not in metadata
    assert "HomePageUrl" not in metadata
    notes = [line for line in result.stderr.splitlines() if "SourceCodeUrl" in line]
    assert len(notes) == 1, result.stderr
    assert "no SOURCE_URL and no origin remote" in notes[0]
    assert "privately" in notes[0]
    assert "Serverless Application Repository" in notes[0]
    assert "SOURCE_URL=https://" in notes[0]
    # The README goes as it is (its links relative), even after a run that rewrote it.
    readme_notes = [line for line in result.stderr.splitlines() if "stay relative" in line]
    assert len(readme_notes) == 1, result.stderr
    assert "no SOURCE_URL and no origin remote, so the README's links" in readme_notes[0]
    readme = uploaded(yaml_parse(PACKAGED.read_text())["Metadata"][SAR]["ReadmeUrl"])
    assert readme == README.read_bytes()


@pytest.mark.parametrize(
    ("variable", "value", "reason"),
    [
        ("SOURCE_URL", "http://example.org/acme/cmstoken", "https://"),
        ("SOURCE_URL", "https://bob:s3cret@example.org/acme/cmstoken", "credentials"),
        ("HOME_PAGE_URL", "https://example.org/acme cmstoken", "whitespace"),
    ],
)
def test_a_bad_url_fails_before_anything_is_uploaded(
    bucket: str, variable: str, value: str, reason: str
) -> None:
    PACKAGED.write_text("a stale packaged template\n")
    arguments = [f"BUCKET={BUCKET}", "PREFIX=v1", f"SOURCE_URL={SOURCE_URL}", f"{variable}={value}"]
    result = make_package(*arguments, env=dict(os.environ))
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in result.stderr.splitlines() if line.startswith("make package:")]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"make package: {variable} must be an https:// URL")
    assert reason in lines[0]
    assert "s3cret" not in result.stdout + result.stderr
    assert not PACKAGED.exists()
    assert "Contents" not in boto3.client("s3").list_objects_v2(Bucket=BUCKET)
