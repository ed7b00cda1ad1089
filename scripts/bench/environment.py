"""A cold start's whole environment: what template.yaml gives the function (its values pointed
at moto's server and the emulator), what Lambda's runtime sets, and Lambda's ``sys.path``."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from local_stack import BOOTSTRAP, REFRESH_SECRET, ROTATOR, SERVICE_SECRET, TIMEOUTS

from .build import Layout
from .links import TIMEOUT_SECONDS as LINKS_TIMEOUT_SECONDS
from .probe import Subject
from .runner import ROOT

# Each function's timeout (template.yaml's), which its context's remaining time counts down.
TIMEOUT_SECONDS = {
    "rotator": TIMEOUTS[ROTATOR],
    "bootstrap": TIMEOUTS[BOOTSTRAP],
    "links": LINKS_TIMEOUT_SECONDS,
}


class Tagged:
    """A value under a YAML tag (``!Ref Name``, ``!Sub ...``): the tag without ``!``."""

    def __init__(self, tag: str, value: Any) -> None:
        self.tag, self.value = tag, value


def load_template() -> Any:
    """template.yaml, CloudFormation's short tags read as ``Tagged`` values."""
    import yaml

    class Loader(yaml.SafeLoader):  # type: ignore[misc]  # PyYAML ships no types
        pass

    def tagged(loader: Loader, suffix: str, node: Any) -> Tagged:
        if isinstance(node, yaml.ScalarNode):
            return Tagged(suffix, loader.construct_scalar(node))
        if isinstance(node, yaml.SequenceNode):
            return Tagged(suffix, loader.construct_sequence(node, deep=True))
        return Tagged(suffix, loader.construct_mapping(node, deep=True))

    Loader.add_multi_constructor("!", tagged)
    return yaml.load((ROOT / "template.yaml").read_text(), Loader=Loader)  # noqa: S506


def declared_variables(template: Any, function: str) -> dict[str, Any]:
    """The variables the template sets for ``functions/<function>/``: Globals, then its own."""

    def variables(properties: Mapping[str, Any] | None) -> dict[str, Any]:
        return dict(((properties or {}).get("Environment") or {}).get("Variables") or {})

    found = variables((template.get("Globals") or {}).get("Function"))
    for resource in (template.get("Resources") or {}).values():
        properties = resource.get("Properties") or {}
        if (
            resource.get("Type") == "AWS::Serverless::Function"
            and str(properties.get("CodeUri", "")).rstrip("/") == f"functions/{function}"
        ):
            found.update(variables(properties))
    return found


def template_environment(function: str, local: Mapping[str, str]) -> dict[str, str]:
    """The environment template.yaml gives ``functions/<function>/`` (Globals, then the function's
    own), each variable's value from ``local`` or else the literal or parameter default it has.
    A variable the bench cannot give a value fails, so the bench follows the template."""
    template = load_template()
    parameters = template.get("Parameters") or {}
    environment = {}
    for name, value in declared_variables(template, function).items():
        if name in local:
            environment[name] = local[name]
        elif isinstance(value, bool):
            environment[name] = str(value).lower()
        elif isinstance(value, str | int | float):
            environment[name] = str(value)
        elif (
            isinstance(value, Tagged)
            and value.tag == "Ref"
            and "Default" in (parameters.get(value.value) or {})
        ):
            environment[name] = str(parameters[value.value]["Default"])
        else:
            raise RuntimeError(
                f"template.yaml sets {name} for functions/{function} in a way the bench cannot "
                "reproduce locally: give it a local value in scripts/bench/environment.py"
            )
    return environment


def lambda_environment(
    layout: Layout,
    subject: Subject,
    emulator: Any,
    aws_endpoint: str,
    links: Mapping[str, str],
) -> dict[str, str]:
    """The whole environment of one cold start: nothing inherited from this process.
    ``links``: the links function's local resources (``bench.links.LOCAL_VARIABLES``: its
    !Ref values and ``AWS_ENDPOINT_URL_LAMBDA``, the local Lambda API)."""
    function = subject.function or "rotator"
    name = f"cmstoken-bench-{function}"
    env = template_environment(
        function,
        {
            "SERVICE_BASE_URL": emulator.base_url,
            "REFRESH_SECRET_ID": REFRESH_SECRET,
            "SERVICE_TOKEN_SECRET_ID": SERVICE_SECRET,
            "POWERTOOLS_METRICS_NAMESPACE": "CmsToken/bench",
            **links,
        },
    )
    env.update(
        {
            # What Lambda's runtime sets.
            "AWS_REGION": "us-east-1",
            "AWS_DEFAULT_REGION": "us-east-1",
            "AWS_EXECUTION_ENV": "AWS_Lambda_python3.13",
            "AWS_LAMBDA_FUNCTION_NAME": name,
            "AWS_LAMBDA_FUNCTION_VERSION": "$LATEST",
            "AWS_LAMBDA_FUNCTION_MEMORY_SIZE": "256",
            "LAMBDA_TASK_ROOT": str(layout.function(function)),
            "_HANDLER": "app.lambda_handler",
            "TZ": ":UTC",
            "LANG": "C.UTF-8",
            # Lambda's sys.path order: the task root, the layer, then the runtime's boto3.
            "PYTHONPATH": os.pathsep.join(
                [str(layout.function(function)), str(layout.layer), str(layout.runtime)]
            ),
            "PYTHONDONTWRITEBYTECODE": "1",  # /var/task and /opt are read-only
            # moto's server, the local Lambda API (the bootstrap, for the links), dummy
            # credentials, no configuration files, no metadata service.
            "AWS_ENDPOINT_URL": aws_endpoint,
            "AWS_ENDPOINT_URL_LAMBDA": links["AWS_ENDPOINT_URL_LAMBDA"],
            "AWS_ACCESS_KEY_ID": "bench",
            "AWS_SECRET_ACCESS_KEY": "bench",
            "AWS_CONFIG_FILE": str(layout.cwd / "no-aws-config"),
            "AWS_SHARED_CREDENTIALS_FILE": str(layout.cwd / "no-aws-credentials"),
            "AWS_EC2_METADATA_DISABLED": "true",
            "BENCH_TIMEOUT_SECONDS": str(TIMEOUT_SECONDS[function]),
        }
    )
    return env
