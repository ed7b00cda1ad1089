"""`make check` (scripts/changed_checks.py): which unit tests a changed file calls for, and the
commands it runs for a change."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import changed_checks
from changed_checks import ALL_UNIT, ROOT, commands, mirrors, plan, typed, unit_tests

TESTS = [
    "tests/unit/aws/test_store.py",
    "tests/unit/core/test_settings.py",
    "tests/unit/core/test_retry.py",
    "tests/unit/links/test_link_tokens.py",
    "tests/unit/links/test_link_token_properties.py",
    "tests/unit/test_cost.py",
    "tests/unit/template/test_sar_urls.py",
]


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("layers/cmstoken/cmstoken/core/settings.py", ("tests/unit/core/test_settings.py",)),
        ("layers/cmstoken/cmstoken/links/tokens.py", ("tests/unit/links/test_link_tokens.py",)),
        ("layers/cmstoken/cmstoken/aws/secrets.py", ("tests/unit/aws",)),  # no test_*secrets*
        ("layers/cmstoken/cmstoken/runtime.py", ALL_UNIT),
        ("scripts/cost.py", ("tests/unit/test_cost.py",)),
        ("scripts/sar_urls.py", ("tests/unit/template/test_sar_urls.py",)),
        ("scripts/demo.py", ALL_UNIT),
        ("tests/unit/core/test_retry.py", ("tests/unit/core/test_retry.py",)),
        ("tests/unit/links/links_world.py", ("tests/unit/links",)),
        ("tests/simulation/search.py", ("tests/unit/simulation",)),
        ("tests/integration/test_package.py", ()),
        ("tests/harness.py", ALL_UNIT),
        ("template.yaml", ALL_UNIT),
        ("docs/development.md", ALL_UNIT),
    ],
)
def test_each_changed_file_calls_for_the_tests_that_mirror_it(
    path: str, expected: tuple[str, ...]
) -> None:
    assert mirrors(path, TESTS) == expected


def test_a_file_it_cannot_map_runs_every_unit_test() -> None:
    changed = ["layers/cmstoken/cmstoken/core/retry.py", "Makefile"]
    assert plan(changed, TESTS) == ["tests/unit", "--ignore=tests/unit/simulation"]
    # the explorations (minutes) too when a change calls for them
    assert plan([*changed, "tests/simulation/search.py"], TESTS) == ["tests/unit"]
    week = "tests/unit/simulation/test_simulation_week.py"
    assert plan([*changed, week], [*TESTS, week]) == ["tests/unit"]


def test_a_folder_run_whole_takes_in_its_files() -> None:
    changed = [
        "layers/cmstoken/cmstoken/aws/secrets.py",
        "tests/unit/aws/test_store.py",
        "layers/cmstoken/cmstoken/core/retry.py",
        "tests/integration/test_package.py",
    ]
    assert plan(changed, TESTS) == ["tests/unit/aws", "tests/unit/core/test_retry.py"]


def test_the_mirrored_tests_exist_in_this_checkout() -> None:
    tests = unit_tests()
    assert "tests/unit/test_changed_checks.py" in tests
    assert mirrors("scripts/changed_checks.py", tests) == ("tests/unit/test_changed_checks.py",)
    library = ROOT / "layers" / "cmstoken" / "cmstoken"
    for module in library.glob("*/*.py"):
        for target in mirrors(str(module.relative_to(ROOT)), tests):
            assert (ROOT / target).exists(), (module, target)


def test_the_commands_lint_type_and_test_the_changed_python() -> None:
    changed = ["scripts/changed_checks.py", "docs/development.md", "gone.py"]
    steps = commands(changed, jobs=2)
    tools = [(step[0].rsplit("/", 1)[-1], step[1:]) for step in steps]
    assert tools[0] == ("ruff", ["check", "scripts/changed_checks.py"])
    assert tools[1] == ("ruff", ["format", "--check", "scripts/changed_checks.py"])
    assert tools[2] == ("mypy", ["scripts/changed_checks.py"])
    spared = "--ignore=tests/unit/simulation"
    assert tools[3] == ("pytest", ["-q", "-n", "2", "--dist", "worksteal", "tests/unit", spared])
    assert {Path(step[0]).parent for step in steps} == {Path(sys.executable).parent}
    assert typed(["scripts/cost.py", "recipes/x.py"]) == ["scripts/cost.py"]
    assert commands([], jobs=2) == []


def test_one_test_file_runs_in_this_process() -> None:
    (step,) = commands(["tests/unit/core/test_retry.py"], jobs=2)[-1:]
    assert step[1:] == ["-q", "tests/unit/core/test_retry.py"]


def test_make_check_dry_run_prints_its_plan(capsys: pytest.CaptureFixture[str]) -> None:
    """`make check` as docs/development.md shows it, without running the steps."""
    assert changed_checks.main(["--dry-run"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("make check: ")
    assert "files changed against main" in out.splitlines()[0]
