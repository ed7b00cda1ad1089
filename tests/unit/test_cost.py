"""scripts/cost.py (`make cost`): docs/cost.md holds exactly the table it computes from
template.yaml, the layer's observability module and scripts/cost_prices.toml, so a change that
changes the cost fails here until `make cost` rewrites the doc; what it counts follows the
template (read through scripts/cfn_intrinsics.py, as the template's tests read it); the prices
file says where each price comes from. No network: everything is read from the repository."""

from __future__ import annotations

import copy
import re
import tomllib
from datetime import date
from pathlib import Path
from typing import Any

import pytest

import cost
from template_model import of_type, source

ROOT = Path(__file__).resolve().parents[2]

OBSERVABILITY_SOURCE = cost.OBSERVABILITY.read_text(encoding="utf-8")
METRICS = cost.emitted_metrics(OBSERVABILITY_SOURCE)
PRICES = cost.load_prices()
DEFAULT = int(source()["Parameters"]["RotationIntervalMinutes"]["Default"])


def template() -> dict[str, Any]:
    """A fresh copy of template.yaml as the script reads it, for a test to change."""
    return copy.deepcopy(cost.load_template())


def costs(changed: dict[str, Any], interval: int = DEFAULT) -> dict[str, float]:
    return cost.column_costs(cost.usage(cost.stack_at(changed, interval), METRICS), PRICES)


def test_the_doc_holds_the_table_make_cost_writes() -> None:
    expected = cost.render(cost.load_template(), PRICES, OBSERVABILITY_SOURCE)
    assert cost.doc_block() == expected, "the cost changed: run `make cost` and commit docs/cost.md"


def test_the_table_has_a_row_for_each_allowed_interval() -> None:
    allowed = sorted(
        int(v) for v in source()["Parameters"]["RotationIntervalMinutes"]["AllowedValues"]
    )
    assert cost.interval_values(source()) == allowed
    rows = [
        line
        for line in cost.render(source(), PRICES, OBSERVABILITY_SOURCE).splitlines()
        if re.match(r"\| \d+( \(default\))? \|", line)
    ]
    assert [int(row.split()[1]) for row in rows] == allowed
    assert [row for row in rows if "(default)" in row] == [rows[allowed.index(DEFAULT)]]


@pytest.mark.parametrize("interval", [5, 10, 15, 30, 60])
def test_the_runs_are_the_schedules(interval: int) -> None:
    stack = cost.stack_at(source(), interval)
    assert stack.rotator.runs_per_month == pytest.approx(730 * 60 / interval)
    assert cost.usage(stack, METRICS).quantities["scheduler_invocations"] == pytest.approx(
        730 * 60 / interval
    )


def test_a_schedule_is_read_in_minutes_hours_or_days() -> None:
    assert cost.runs_per_month("rate(1 hour)") == 730
    assert cost.runs_per_month("rate(30 minutes)") == 1460
    assert cost.runs_per_month("rate(1 day)") == pytest.approx(730 / 24)
    with pytest.raises(ValueError, match="cannot count"):
        cost.runs_per_month("cron(0 * * * ? *)")


def test_what_is_counted_is_what_the_template_creates() -> None:
    resources = source()["Resources"]
    stack = cost.stack_at(source(), DEFAULT)
    # Every alarm exists at the defaults: the one with a condition needs a non-zero warning.
    assert source()["Parameters"]["ReauthorizationWarningSeconds"]["Default"] != 0
    assert set(stack.alarms) == set(of_type(resources, "AWS::CloudWatch::Alarm"))
    assert sum(stack.alarms.values()) == len(of_type(resources, "AWS::CloudWatch::Alarm"))
    assert set(stack.composite_alarms) == set(of_type(resources, "AWS::CloudWatch::CompositeAlarm"))
    assert set(stack.dashboards) == set(of_type(resources, "AWS::CloudWatch::Dashboard"))
    secrets = of_type(resources, "AWS::SecretsManager::Secret")
    assert set(stack.secrets) == {name for name, s in secrets.items() if "Condition" not in s}
    assert {name for name, s in secrets.items() if "Condition" in s} <= set(stack.left_out)
    memory = source()["Globals"]["Function"]["MemorySize"]
    assert stack.rotator.memory_mb == memory
    retention = source()["Parameters"]["LogRetentionDays"]["Default"]
    assert stack.rotator.retention_days == retention


def test_an_alarm_whose_condition_is_false_is_not_counted() -> None:
    changed = template()
    changed["Parameters"]["ReauthorizationWarningSeconds"]["Default"] = 0
    stack = cost.stack_at(changed, DEFAULT)
    assert "RefreshFamilyAgingAlarm" not in stack.alarms
    assert "RefreshFamilyAgingAlarm" in stack.left_out
    assert costs(changed)["Alarms"] == pytest.approx(costs(template())["Alarms"] - 0.10)


def test_one_click_reauthorization_is_left_out_at_the_defaults_with_the_secrets_price() -> None:
    """OneClickReauthorization is off by default: its resources are named as not created, the
    signing key secret with what it would add a month."""
    assert source()["Parameters"]["OneClickReauthorization"]["Default"] == "false"
    stack = cost.stack_at(source(), DEFAULT)
    one_click = {
        name: r["Type"]
        for name, r in source()["Resources"].items()
        if r.get("Condition") == "OneClickEnabled"
    }
    assert "LinksFunction" in one_click
    assert one_click.items() <= stack.left_out.items()
    assert "LinkSigningKeySecret" not in stack.secrets
    assert stack.rotator.name == "RotatorFunction"
    text = cost.render(source(), PRICES, OBSERVABILITY_SOURCE)
    assert "`LinkSigningKeySecret` (AWS::SecretsManager::Secret: +$0.40 a month when created)" in (
        text
    )
    assert "`AlarmTopicKey` (AWS::KMS::Key: +$1.00 a month when created)" in text


def test_an_added_alarm_adds_its_price() -> None:
    changed = template()
    resources = changed["Resources"]
    resources["AnotherAlarm"] = copy.deepcopy(resources["CredentialLostAlarm"])
    before, after = costs(template()), costs(changed)
    assert after["Alarms"] == pytest.approx(before["Alarms"] + 0.10)
    assert {k: v for k, v in after.items() if k != "Alarms"} == {
        k: v for k, v in before.items() if k != "Alarms"
    }


def test_a_high_resolution_alarm_is_refused() -> None:
    changed = template()
    changed["Resources"]["CredentialLostAlarm"]["Properties"]["Period"] = 10
    with pytest.raises(ValueError, match="high-resolution"):
        cost.stack_at(changed, DEFAULT)


def test_the_memory_size_changes_the_lambda_line_and_nothing_else() -> None:
    changed = template()
    changed["Globals"]["Function"]["MemorySize"] *= 2
    before, after = costs(template()), costs(changed)
    requests = PRICES.items["lambda_requests"].cost(730 * 60 / DEFAULT)
    assert after["Lambda"] - requests == pytest.approx(2 * (before["Lambda"] - requests))
    assert {k: v for k, v in after.items() if k != "Lambda"} == {
        k: v for k, v in before.items() if k != "Lambda"
    }


def test_the_architecture_picks_its_duration_price() -> None:
    changed = template()
    changed["Globals"]["Function"]["Architectures"] = ["x86_64"]
    month = cost.usage(cost.stack_at(changed, DEFAULT), METRICS)
    assert "lambda_duration_x86_64" in month.quantities
    assert costs(changed)["Lambda"] > costs(template())["Lambda"]


def test_the_log_retention_sets_the_logs_stored() -> None:
    changed = template()
    changed["Parameters"]["LogRetentionDays"]["Default"] = 365
    stored = {
        days: cost.usage(cost.stack_at(t, DEFAULT), METRICS).quantities["logs_storage"]
        for days, t in ((90, template()), (365, changed))
    }
    assert stored[365] == pytest.approx(stored[90] * 365 / 90)


def test_a_second_dashboard_costs_one_more() -> None:
    changed = template()
    changed["Resources"]["SecondDashboard"] = copy.deepcopy(changed["Resources"]["Dashboard"])
    assert costs(changed)["Dashboard"] == pytest.approx(2 * costs(template())["Dashboard"])


def test_rotations_follow_the_refresh_margin() -> None:
    changed = template()
    changed["Parameters"]["RefreshMarginSeconds"]["Default"] = 12 * 3600  # due after 12 h
    month = cost.usage(cost.stack_at(changed, DEFAULT), METRICS)
    assert month.rotations == pytest.approx(730 / 12)
    assert cost.usage(cost.stack_at(source(), DEFAULT), METRICS).rotations == pytest.approx(
        730 / 18
    )


def test_every_metric_the_alarms_and_the_dashboard_read_is_counted() -> None:
    resources = source()["Resources"]
    read = {
        alarm["Properties"]["MetricName"]
        for alarm in of_type(resources, "AWS::CloudWatch::Alarm").values()
    }
    body = resources["Dashboard"]["Properties"]["DashboardBody"]["Fn::Sub"][0]
    read |= set(re.findall(r'\["\$\{Namespace\}", "(\w+)"', body))
    assert read
    assert read <= METRICS.names


def test_the_metrics_of_every_run_rotations_and_bootstraps_are_the_codes() -> None:
    by_function = cost.metric_names_by_function(OBSERVABILITY_SOURCE)
    assert by_function["record_bootstrap"] == METRICS.on_bootstrap
    assert "UpstreamLatency" in by_function["record_upstream_latency"]
    run = by_function["record_run"] | by_function["record_freshness"]
    assert METRICS.every_run == run - METRICS.on_rotation
    # A scheduled no-op's EMF document (measured for docs/cost.md) carries ten metrics.
    assert len(METRICS.every_run) == 10


@pytest.mark.parametrize(
    "code",
    [
        "def f(name):\n    metrics.add_metric(name=name.upper(), unit='Count', value=1)\n",
        "def f():\n    metrics.add_metric(name=NAMES[0], unit='Count', value=1)\n",
        "def f():\n    metrics.add_dimension(name='stage', value='prod')\n",
    ],
)
def test_a_metric_it_cannot_count_is_refused(code: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011  (either message: not counted is the point)
        cost.metric_names_by_function(code)


def test_the_prices_file_says_where_each_price_comes_from() -> None:
    data = tomllib.loads(cost.PRICES.read_text(encoding="utf-8"))
    assert data["region"] == "us-east-1"
    assert data["currency"] == "USD"
    assert isinstance(data["checked"], date)
    for key, item in data["prices"].items():
        assert set(item) - {"note"} == {
            "service",
            "item",
            "usd",
            "per",
            "unit",
            "free_per_month",
            "source",
        }, key
        assert item["usd"] > 0, key
        assert item["per"] > 0, key
        assert item["free_per_month"] >= 0, key
        assert re.fullmatch(r"https://aws\.amazon\.com/[a-z-]+/pricing/", item["source"]), key


def test_every_column_is_priced_and_every_price_is_used() -> None:
    in_columns = {key for keys in cost.COLUMNS.values() for key in keys}
    assert in_columns <= set(PRICES.items)
    assert set(PRICES.items) - in_columns == {"kms_keys"}  # the optional key, named in the doc


@pytest.mark.parametrize("interval", [5, 60])
def test_the_free_tier_only_lowers_the_bill(interval: int) -> None:
    month = cost.usage(cost.stack_at(source(), interval), METRICS)
    full = cost.column_costs(month, PRICES)
    free = cost.column_costs(month, PRICES, free_tier=True)
    assert all(free[column] <= full[column] for column in full)
    assert free["Secrets Manager"] == full["Secrets Manager"]  # no free tier


def test_write_replaces_only_the_text_between_the_markers(tmp_path: Path) -> None:
    doc = tmp_path / "cost.md"
    doc.write_text(f"# Title\n\n{cost.BEGIN}\nold\n{cost.END}\n\nAfter.\n", encoding="utf-8")
    assert cost.write_doc("new table\n", doc) is True
    assert doc.read_text() == f"# Title\n\n{cost.BEGIN}\nnew table\n{cost.END}\n\nAfter.\n"
    assert cost.doc_block(doc) == "new table\n"
    assert cost.write_doc("new table\n", doc) is False
    doc.write_text("no markers\n", encoding="utf-8")
    with pytest.raises(ValueError, match="markers"):
        cost.write_doc("x\n", doc)
