"""The emulator's control API is documented where users look: `cms-emulator --help` and the
documentation say what the code does, route by route and fault by fault."""

from __future__ import annotations

import subprocess
import sys

from cmsemu import control, faults
from support import documentation

README = documentation()


def test_every_route_and_method_is_documented_and_nothing_else() -> None:
    documented = {(method, name) for method, name, _, _ in control.ROUTES}
    served = {(method, name) for name, methods in control.COMMANDS.items() for method in methods}
    assert documented == served


def test_every_fault_and_parameter_is_documented() -> None:
    assert set(control.FAULTS) == set(faults._PARAMS)
    for kind, parameters in faults._PARAMS.items():
        for parameter in parameters:
            assert parameter in control.FAULTS[kind], (kind, parameter)


def test_the_readme_and_the_help_carry_the_reference() -> None:
    reference = control.reference()
    assert reference in README
    result = subprocess.run(
        [sys.executable, "-m", "cmsemu", "--help"],
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    for line in reference.splitlines():
        assert line.strip() in result.stdout, line
