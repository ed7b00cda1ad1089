"""The Terraform recipe (docs/consume.md) against the schemas of the provider versions it pins.

``terraform validate`` needs the providers, which cannot be downloaded where the tests run
(tests/integration/test_recipes.py runs it when a provider mirror is given). Instead the
recipe's HCL is parsed (python-hcl2) and held against the schema subsets vendored under
tests/data/terraform (its README names their sources): every argument the recipe sets exists
in each checked version and is not read-only, with a literal of the argument's type; every
required argument is set; every attribute the recipe reads exists. Each version constraint
must be exactly "the oldest checked version, below the next major one". The local stack's
override file (``terraform-local-stack``, a ``provider "aws"`` block) is checked the same way,
beside the recipe.
"""

from __future__ import annotations

import itertools
import json
import re
from functools import cache
from pathlib import Path
from typing import Any

import hcl2
import pytest
from hcl2.utils import SerializationOptions

from support import recipe, section

ROOT = Path(__file__).resolve().parents[2]
SCHEMAS = ROOT / "tests" / "data" / "terraform"

Version = tuple[int, ...]
Clause = tuple[str, Version]

# The versions whose schema is vendored and checked, by the local name the recipe gives the
# provider. The oldest is the constraint's lower bound, the major after the newest its upper.
CHECKED: dict[str, tuple[str, ...]] = {
    # 3.0.0 (27 Feb 2026) moved the provider to the plugin framework and added the sensitive
    # `bearer_token`, which the recipe sets; 2.x has no such argument (see BELOW).
    "restapi": ("3.0.0",),
    # 5.77.0 (21 Nov 2024, PR #40009) added the ephemeral aws_secretsmanager_secret_version;
    # 6.0.0 (18 Jun 2025) added only an optional `region` to it, and 6.x is the current major.
    "aws": ("5.77.0", "6.0.0"),
}
# The last release below a lower bound, vendored to show that the bound is needed.
BELOW: dict[str, str] = {"restapi": "2.0.1"}
# Terraform 1.10.0 (27 Nov 2024) brought ephemeral resources and ephemeral values, which the
# recipe reads into a local and a provider block; 1.x keeps its language compatible.
TERRAFORM: tuple[str, ...] = ("1.10.0",)


def version(text: str) -> Version:
    return tuple(int(part) for part in text.split("."))


def full(given: Version) -> Version:
    return (*given, 0, 0, 0)[:3]


def constraint(text: str) -> list[Clause]:
    """A Terraform version constraint: comma-separated ``OP VERSION`` clauses."""
    clauses = []
    for part in text.split(","):
        found = re.fullmatch(r"\s*(>=|<=|~>|!=|=|>|<)?\s*(\d+(?:\.\d+){0,2})\s*", part)
        assert found, f"not a version constraint clause: {part!r} in {text!r}"
        clauses.append((found.group(1) or "=", version(found.group(2))))
    return clauses


def allows(clauses: list[Clause], candidate: Version) -> bool:
    def one(operator: str, given: Version) -> bool:
        bound = full(given)
        if operator == "~>":  # the last given part may grow: ~> 2.1 is >= 2.1, < 3.0
            top = given[:-1] if len(given) > 1 else given
            upper = (*top[:-1], top[-1] + 1)
            return candidate >= bound and candidate < full(upper)
        return {
            "=": candidate == bound,
            "!=": candidate != bound,
            ">": candidate > bound,
            ">=": candidate >= bound,
            "<": candidate < bound,
            "<=": candidate <= bound,
        }[operator]

    return all(one(operator, given) for operator, given in clauses)


def pin_problems(text: str, checked: tuple[str, ...]) -> list[str]:
    """What keeps ``text`` from being exactly ``>= OLDEST, < NEXT_MAJOR.0``."""
    versions = sorted(version(each) for each in checked)
    oldest, newest = versions[0], versions[-1]
    wanted = [(">=", oldest[:2]), ("<", (newest[0] + 1, 0))]
    clauses = constraint(text)
    problems = []
    if clauses != wanted:
        problems.append(f"{text!r} is not '>= {oldest[0]}.{oldest[1]}, < {newest[0] + 1}.0'")
    problems += [
        f"{text!r} refuses the checked version {'.'.join(map(str, each))}"
        for each in versions
        if not allows(clauses, each)
    ]
    if allows(clauses, (newest[0] + 1, 0, 0)):
        problems.append(f"{text!r} allows the next major version {newest[0] + 1}.0.0")
    before = (oldest[0], oldest[1] - 1, 999) if oldest[1] else (oldest[0] - 1, 999, 999)
    if allows(clauses, before):
        older = ".".join(map(str, before))
        problems.append(f"{text!r} allows {older}, older than any checked version")
    return problems


# --- the configuration and the schemas ------------------------------------------------------


def parse(text: str) -> dict[str, Any]:
    options = SerializationOptions(with_comments=False, strip_string_quotes=True)
    config: dict[str, Any] = hcl2.loads(text, serialization_options=options)
    return config


def blocks_in(value: Any) -> bool:
    """Whether an entry of a parsed body is nested blocks (not an argument's value)."""
    return (
        isinstance(value, list)
        and bool(value)
        and all(isinstance(item, dict) and item.get("__is_block__") for item in value)
    )


@cache
def schema_file(name: str, release: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads((SCHEMAS / f"{name}-{release}.json").read_text())
    return document


def schemas(**releases: str) -> dict[str, Any]:
    """The provider schemas, by provider address, of the named provider versions."""
    found: dict[str, Any] = {}
    for name, release in releases.items():
        found.update(schema_file(name, release)["provider_schemas"])
    return found


def fits(value: Any, attribute: dict[str, Any]) -> bool:
    """Whether a literal can be the argument's value (an expression can be anything)."""
    kind = attribute.get("type", "dynamic")
    if value is None or kind == "dynamic":
        return True
    if isinstance(value, str) and re.fullmatch(r"\$\{.*\}", value, re.S):
        return True
    if "nested_type" in attribute:
        return isinstance(value, dict | list)
    if isinstance(value, bool):
        return bool(kind == "bool")
    if isinstance(value, int | float):
        return kind in ("number", "string")
    if isinstance(value, str):
        return bool(kind == "string")
    if isinstance(value, dict):
        return isinstance(kind, list) and kind[0] in ("map", "object")
    if isinstance(value, list):
        return isinstance(kind, list) and kind[0] in ("list", "set", "tuple")
    return False


def body_problems(
    where: str, body: dict[str, Any], block: dict[str, Any], meta: set[str]
) -> list[str]:
    attributes: dict[str, Any] = block.get("attributes", {})
    nested: dict[str, Any] = block.get("block_types", {})
    problems = []
    for name, value in body.items():
        if name == "__is_block__" or name in meta:
            continue
        if blocks_in(value):
            if name not in nested:
                problems.append(f"{where}: no block type {name!r}")
                continue
            for item in value:
                problems += body_problems(f"{where}.{name}", item, nested[name]["block"], set())
            continue
        attribute = attributes.get(name)
        if attribute is None:
            problems.append(f"{where}: no argument {name!r}")
        elif not (attribute.get("required") or attribute.get("optional")):
            problems.append(f"{where}: {name!r} is read-only")
        elif not fits(value, attribute):
            problems.append(f"{where}: {name!r} = {value!r} is not a {attribute['type']}")
    problems += [
        f"{where}: the required argument {name!r} is not set"
        for name, attribute in attributes.items()
        if attribute.get("required") and name not in body
    ]
    problems += [
        f"{where}: the required block {name!r} is missing"
        for name, nested_block in nested.items()
        if nested_block.get("min_items", 0) > 0 and name not in body
    ]
    return problems


KINDS = {  # block type: (schema key, reference prefix, meta-arguments)
    "resource": (
        "resource_schemas",
        "",
        {"count", "for_each", "provider", "depends_on", "lifecycle", "provisioner", "connection"},
    ),
    "data": (
        "data_source_schemas",
        "data.",
        {"count", "for_each", "provider", "depends_on", "lifecycle"},
    ),
    "ephemeral": (
        "ephemeral_resource_schemas",
        "ephemeral.",
        {"count", "for_each", "provider", "depends_on", "lifecycle"},
    ),
}


def recipe_problems(text: str, provider_schemas: dict[str, Any]) -> list[str]:
    """Every way ``text`` disagrees with the schemas (by provider address) it is checked against."""
    config = parse(text)
    sources = {
        name: "registry.terraform.io/" + requirement["source"].lower()
        for terraform in config.get("terraform", [])
        for required in terraform.get("required_providers", [])
        for name, requirement in required.items()
        if name != "__is_block__"
    }
    problems = []

    def schema_of(local: str) -> dict[str, Any] | None:
        if local not in sources:
            problems.append(f"{local!r} is not in required_providers")
            return None
        if sources[local] not in provider_schemas:
            problems.append(f"no schema for {sources[local]}")
            return None
        found: dict[str, Any] = provider_schemas[sources[local]]
        return found

    for entry in config.get("provider", []):
        for local, body in entry.items():
            provider = schema_of(local)
            if provider is None:
                continue
            if "provider" not in provider:
                problems.append(f'provider "{local}": no provider schema for {sources[local]}')
                continue
            problems += body_problems(
                f'provider "{local}"', body, provider["provider"]["block"], {"alias", "version"}
            )
    for kind, (key, prefix, meta) in KINDS.items():
        for entry in config.get(kind, []):
            for type_name, named in entry.items():
                for name, body in named.items():
                    where = f'{kind} "{type_name}" "{name}"'
                    # the provider meta-argument names a provider ("${aws.west}"); by
                    # default a type belongs to the provider its name starts with
                    local = re.sub(r"^\$\{(\w+).*$", r"\1", str(body.get("provider", "")))
                    local = local or type_name.split("_")[0]
                    provider = schema_of(local)
                    if provider is None:
                        continue
                    schema = provider.get(key, {}).get(type_name)
                    if schema is None:
                        problems.append(f"{where}: {sources[local]} has no {type_name}")
                        continue
                    block = schema["block"]
                    problems += body_problems(where, body, block, meta)
                    pattern = rf"(?<![\w.]){re.escape(prefix + type_name)}\.{name}\.(\w+)"
                    problems += [
                        f"{where}: no attribute {read!r} to read"
                        for read in sorted(set(re.findall(pattern, text)))
                        if read not in block.get("attributes", {})
                        and read not in block.get("block_types", {})
                    ]
    return problems


# --- the recipe -----------------------------------------------------------------------------


def required_providers() -> dict[str, dict[str, str]]:
    (terraform,) = parse(recipe("terraform"))["terraform"]
    (required,) = terraform["required_providers"]
    return {name: value for name, value in required.items() if name != "__is_block__"}


def test_the_vendored_schemas_are_the_checked_versions() -> None:
    named = {f"{name}-{release}.json" for name, releases in CHECKED.items() for release in releases}
    named |= {f"{name}-{release}.json" for name, release in BELOW.items()}
    assert {path.name for path in SCHEMAS.glob("*.json")} == named
    readme = (SCHEMAS / "README.md").read_text()
    for file in named:
        assert f"`{file}`" in readme, f"{file} has no source in tests/data/terraform/README.md"


@pytest.mark.parametrize(
    "releases",
    [
        dict(zip(CHECKED, combination, strict=True))
        for combination in itertools.product(*CHECKED.values())
    ],
    ids=lambda releases: "-".join(f"{name}{release}" for name, release in releases.items()),
)
def test_the_terraform_recipe_fits_the_schema_of_every_checked_version(
    releases: dict[str, str],
) -> None:
    assert recipe_problems(recipe("terraform"), schemas(**releases)) == []


def test_the_terraform_recipe_pins_providers_from_the_oldest_checked_to_the_next_major() -> None:
    """restapi ``>= 3.0, < 4.0``: 3.0.0 is the first release with ``bearer_token`` (2.0.1, the
    last 2.x, lacks it: see the test below), and 4.0 may change what 3.0 kept. aws ``>= 5.77,
    < 7.0``: 5.77.0 added the ephemeral ``aws_secretsmanager_secret_version``, and the recipe
    fits both 5.77.0 and 6.x (which only added ``region``), so a root module still on 5.x can
    use it; 7.0 is the next major."""
    providers = required_providers()
    assert set(providers) == set(CHECKED)
    for name, requirement in providers.items():
        assert pin_problems(requirement["version"], CHECKED[name]) == [], name
        if name in BELOW:
            assert not allows(constraint(requirement["version"]), version(BELOW[name]))


def test_the_terraform_recipe_asks_for_terraform_1_10_up_to_2_0() -> None:
    """Ephemeral resources, and ephemeral values in locals and provider blocks, came with
    Terraform 1.10.0; a Terraform 2 may break the 1.x language."""
    (terraform,) = parse(recipe("terraform"))["terraform"]
    assert pin_problems(terraform["required_version"], TERRAFORM) == []


def with_local_stack() -> str:
    """The recipe's configuration with the local stack's override file beside it: the recipe
    has no ``provider "aws"`` block, so Terraform's merge is this union."""
    return recipe("terraform") + "\n" + recipe("terraform-local-stack")


@pytest.mark.parametrize("release", CHECKED["aws"])
def test_the_local_stack_override_fits_the_schema_of_every_checked_aws_version(
    release: str,
) -> None:
    assert recipe_problems(with_local_stack(), schemas(restapi="3.0.0", aws=release)) == []


def test_the_local_stack_override_is_the_provider_block_the_text_describes() -> None:
    """Only a ``provider "aws"`` block (an override file can add no variable or other block,
    and can add a default provider configuration the recipe lacks), pointed at the local
    stack's Secrets Manager on 127.0.0.1 with its Region and credentials."""
    override = parse(recipe("terraform-local-stack"))
    assert set(override) == {"provider"}
    ((local, body),) = (item for entry in override["provider"] for item in entry.items())
    assert local == "aws"
    assert "aws" not in {
        name for entry in parse(recipe("terraform")).get("provider", []) for name in entry
    }
    assert {name: value for name, value in body.items() if name != "endpoints"} == {
        "region": "us-east-1",
        "access_key": "local",
        "secret_key": "local",
        "skip_credentials_validation": True,
        "skip_requesting_account_id": True,
        "__is_block__": True,
    }
    (endpoints,) = body["endpoints"]
    assert endpoints["secretsmanager"] == "http://127.0.0.1:PORT"
    stack = (ROOT / "scripts" / "local_stack.py").read_text()
    assert 'ThreadedMotoServer(ip_address="127.0.0.1"' in stack
    text = " ".join(section("Terraform").split())
    for said in (
        "as `local_stack_override.tf`",
        "`PORT` the port of the `AWS_ENDPOINT_URL` that `.venv/local-stack.env`",
        'set `cms_token_secret_arn = "cmstoken-local/service-token"`',
    ):
        assert said in text


def test_the_terraform_recipe_needs_restapi_3() -> None:
    problems = recipe_problems(recipe("terraform"), schemas(restapi=BELOW["restapi"], aws="6.0.0"))
    assert problems == ["provider \"restapi\": no argument 'bearer_token'"]


# --- the check itself catches what it is for ------------------------------------------------


SECRET = 'ephemeral "aws_secretsmanager_secret_version" "cms"'
OBJECT = 'resource "restapi_object" "cluster"'
REST = 'provider "restapi"'
AWS = 'provider "aws"'


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        # a renamed argument: unknown, and the required one it replaced is missing
        (
            "  secret_id = var.",
            "  secret_arn = var.",
            [
                f"{SECRET}: no argument 'secret_arn'",
                f"{SECRET}: the required argument 'secret_id' is not set",
            ],
        ),
        ("  bearer_token ", "  token ", [f"{REST}: no argument 'token'"]),
        (".cms.secret_string)", ".cms.value)", [f"{SECRET}: no attribute 'value' to read"]),
        (
            "cluster.api_response",
            "cluster.response",
            [f"{OBJECT}: no attribute 'response' to read"],
        ),
        (
            "  write_returns_object = true",
            '  write_returns_object = "yes"',
            [f"{REST}: 'write_returns_object' = 'yes' is not a bool"],
        ),
        (
            "  data = jsonencode(var.cluster)",
            '  id   = "x"',
            [f"{OBJECT}: 'id' is read-only", f"{OBJECT}: the required argument 'data' is not set"],
        ),
        (
            'source  = "Mastercard/restapi"',
            'source  = "mastercard/rest"',
            ["no schema for registry.terraform.io/mastercard/rest"] * 2,
        ),
        # the local stack's provider block
        (
            "  skip_requesting_account_id  =",
            "  skip_requesting_account =",
            [f"{AWS}: no argument 'skip_requesting_account'"],
        ),
        (
            "  skip_credentials_validation = true",
            '  skip_credentials_validation = "yes"',
            [f"{AWS}: 'skip_credentials_validation' = 'yes' is not a bool"],
        ),
        ("  endpoints {", "  endpoint {", [f"{AWS}: no block type 'endpoint'"]),
        (
            "    secretsmanager =",
            "    secrets_manager =",
            [f"{AWS}.endpoints: no argument 'secrets_manager'"],
        ),
    ],
)
def test_the_schema_check_catches(old: str, new: str, expected: list[str]) -> None:
    text = with_local_stack()
    assert text.count(old) == 1
    changed = text.replace(old, new)
    assert recipe_problems(changed, schemas(restapi="3.0.0", aws="6.0.0")) == expected


@pytest.mark.parametrize(
    ("pin", "checked", "expected"),
    [
        (
            "~> 2.0",
            ("3.0.0",),
            [
                "'~> 2.0' is not '>= 3.0, < 4.0'",
                "'~> 2.0' refuses the checked version 3.0.0",
                "'~> 2.0' allows 2.999.999, older than any checked version",
            ],
        ),
        (
            ">= 5.77",
            ("5.77.0", "6.0.0"),
            ["'>= 5.77' is not '>= 5.77, < 7.0'", "'>= 5.77' allows the next major version 7.0.0"],
        ),
        (
            ">= 5.0, < 7.0",
            ("5.77.0", "6.0.0"),
            [
                "'>= 5.0, < 7.0' is not '>= 5.77, < 7.0'",
                "'>= 5.0, < 7.0' allows 5.76.999, older than any checked version",
            ],
        ),
        (">= 3.0, < 4.0", ("3.0.0",), []),
    ],
)
def test_the_pin_check_catches(pin: str, checked: tuple[str, ...], expected: list[str]) -> None:
    assert pin_problems(pin, checked) == expected


def test_the_constraint_reading_follows_terraform() -> None:
    assert allows(constraint("~> 2.0"), (2, 9, 9))
    assert not allows(constraint("~> 2.0"), (3, 0, 0))
    assert allows(constraint("~> 2.1.3"), (2, 1, 9))
    assert not allows(constraint("~> 2.1.3"), (2, 2, 0))
    assert allows(constraint("= 1.2"), (1, 2, 0))
    assert allows(constraint("1.2.0"), (1, 2, 0))
    assert not allows(constraint(">= 1.10, != 1.10.1"), (1, 10, 1))
    with pytest.raises(AssertionError, match="not a version constraint"):
        constraint(">= 1.x")
