"""The library's folders are its layers, and imports only go down them (see the package's
``__init__.py``): the folder tree answers "where is the code that talks to X", and a module can
be read knowing that nothing below it depends on what is above."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "layers" / "cmstoken" / "cmstoken"

# What each part of the package may import of the package (besides itself and ``cmstoken``'s
# own ``__version__``).
MAY_IMPORT: dict[str, set[str]] = {
    "core": set(),
    "upstream": {"core"},
    "aws": {"core"},
    "rotation": {"upstream", "aws", "core"},
    "bootstrap": {"rotation", "upstream", "aws", "core"},
    "consumer": {"aws", "core"},
    "links": {"aws", "core"},
    "cli": {"consumer", "upstream", "core"},
    "observability": {"rotation", "aws", "core"},
    "runtime": {"observability", "bootstrap", "links", "rotation", "upstream", "aws", "core"},
}
# Third-party imports that belong to one layer only: requests to the upstream (and the
# consumer's ``requests`` auth adapter), boto3 to the AWS adapters (and the operator's tool,
# which calls AWS with the operator's own credentials), Powertools to observability.
ONLY_IN: dict[str, set[str]] = {
    "requests": {"upstream", "consumer"},
    "boto3": {"aws", "cli"},
    "aws_lambda_powertools": {"observability"},
}


def _part(path: Path) -> str:
    relative = path.relative_to(PACKAGE)
    return relative.parts[0] if len(relative.parts) > 1 else relative.stem


def _imports(path: Path) -> set[str]:
    """Every module name this file imports when it runs (absolute, relative ones resolved;
    not those under ``if TYPE_CHECKING:``, which only the type checker reads)."""
    found: set[str] = set()
    package = ["cmstoken", *path.relative_to(PACKAGE).parent.parts]
    tree = ast.parse(path.read_text())
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for statement in node.body
        for inner in ast.walk(statement)
    }
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join([*package[: len(package) - node.level + 1], base]).strip(".")
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


MODULES = sorted(p for p in PACKAGE.rglob("*.py") if p.name != "__init__.py" or p.parent != PACKAGE)


def test_every_part_of_the_package_has_a_rule() -> None:
    assert {_part(p) for p in MODULES} == set(MAY_IMPORT)


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_imports_only_go_down_the_layers(path: Path) -> None:
    part = _part(path)
    allowed = MAY_IMPORT[part] | {part}
    for name in _imports(path):
        pieces = name.split(".")
        if pieces[0] != "cmstoken" or len(pieces) == 1 or pieces[1] == "__version__":
            continue
        assert pieces[1] in allowed, f"{part} imports {name}"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_third_party_clients_stay_in_their_layer(path: Path) -> None:
    part = _part(path)
    for name in _imports(path):
        top = name.split(".")[0]
        if top == "botocore":
            top = "boto3"
        if top in ONLY_IN:
            assert part in ONLY_IN[top], f"{part} imports {name}"


def test_each_folder_says_what_it_holds_and_what_it_may_import() -> None:
    for folder in (p for p in PACKAGE.iterdir() if (p / "__init__.py").is_file()):
        doc = ast.get_docstring(ast.parse((folder / "__init__.py").read_text()))
        assert doc, folder.name
        assert "import" in doc.lower(), folder.name


# A class or function longer than this does more than one thing: split it by responsibility.
LONGEST_CLASS = 250
LONGEST_FUNCTION = 60


@pytest.mark.parametrize("path", MODULES, ids=lambda p: str(p.relative_to(PACKAGE)))
def test_no_class_or_function_is_too_long_to_read(path: Path) -> None:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            assert node.end_lineno is not None
            lines = node.end_lineno - node.lineno + 1
            limit = LONGEST_CLASS if isinstance(node, ast.ClassDef) else LONGEST_FUNCTION
            assert lines <= limit, f"{node.name} is {lines} lines (at most {limit})"


def test_every_folder_of_the_package_is_installed() -> None:
    """setuptools installs the packages pyproject.toml lists, and no folder it does not."""
    import tomllib

    listed = tomllib.loads((PACKAGE.parents[2] / "pyproject.toml").read_text())["tool"][
        "setuptools"
    ]["packages"]
    folders = {
        ".".join(("cmstoken", *init.parent.relative_to(PACKAGE).parts))
        for init in PACKAGE.rglob("__init__.py")
    }
    assert folders == {name for name in listed if name.startswith("cmstoken")}
