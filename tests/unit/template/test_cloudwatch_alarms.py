"""The CloudWatch metric alarm model (tests/cloudwatch_alarms.py) against the rules and worked
examples of the AWS documents it cites. Expected values are read off those documents (or
derived by hand from their definitions), never from the model's output.

Documents:

* MISSING: "Configuring how CloudWatch alarms treat missing data",
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarms-and-missing-data.html
* EVAL: "Alarm evaluation",
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-evaluation.html
* WINDOW: "Alarm evaluation window",
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-evaluation-window.html
* ALARMS: "Using Amazon CloudWatch alarms",
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/AlarmThatSendsEmail.html
* PUT: "PutMetricAlarm",
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html
* STATS: "CloudWatch statistics definitions",
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Statistics-definitions.html
* CFN: "AWS::CloudWatch::Alarm",
  https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-cloudwatch-alarm.html
* DATUM: "MetricDatum",
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_MetricDatum.html
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, TypeVar, cast

import pytest

from cloudwatch_alarms import (
    ALARM,
    INSUFFICIENT_DATA,
    OK,
    STATES,
    STATISTICS,
    TREATMENTS,
    AlarmSpec,
    Transition,
    aggregate,
    assess_range,
    default_evaluation_range,
    evaluate,
    evaluation_interval,
)

# A UTC midnight, so that minute, hour and day boundaries fall on multiples of T0.
T0 = 20_834 * 86_400
RETAIN = "retain current state"
MINUTE = 60


def spec(**overrides: Any) -> AlarmSpec:
    """An alarm on which X (1.0) breaches and 0 (0.0) does not: Maximum > 0.5, 5-minute
    periods, N = 3, as in the tables of MISSING."""
    fields: dict[str, Any] = {
        "name": "test",
        "period": 300,
        "evaluation_periods": 3,
        "threshold": 0.5,
        "comparison": "GreaterThanThreshold",
        "statistic": "Maximum",
    }
    fields.update(overrides)
    return AlarmSpec(**fields)


def pattern(text: str) -> list[float | None]:
    """MISSING's notation, most recent on the right: "0 is a non-breaching data point, X is a
    breaching data point, and - is a missing data point"."""
    return [{"0": 0.0, "X": 1.0, "-": None}[mark] for mark in text.split()]


def transitions(*changes: tuple[float, str, str]) -> list[Transition]:
    return [Transition(at=float(at), old=old, new=new) for at, old, new in changes]


# --- MISSING, "How alarm state is evaluated when data is missing": the two tables -------------

# First table: "Datapoints to Alarm and Evaluation Periods are both 3 ... 5 is the evaluation
# range". Columns: data points, "# of data points that must be filled", MISSING, IGNORE,
# BREACHING, NOT BREACHING.
THREE_OF_THREE = [
    ("0 - X - X", 0, OK, OK, OK, OK),
    ("0 - - - -", 2, OK, OK, OK, OK),
    ("- - - - -", 3, INSUFFICIENT_DATA, RETAIN, ALARM, OK),
    ("0 X X - X", 0, ALARM, ALARM, ALARM, ALARM),
    ("- - X - -", 2, ALARM, RETAIN, ALARM, OK),
]
# Second table: "Datapoints to Alarm is only 2 while Evaluation Periods is 3 ... The evaluation
# range is 5."
TWO_OF_THREE = [
    ("0 - X - X", 0, ALARM, ALARM, ALARM, ALARM),
    ("0 0 X 0 X", 0, ALARM, ALARM, ALARM, ALARM),
    ("0 - X - -", 1, OK, OK, ALARM, OK),
    ("- - - - 0", 2, OK, OK, ALARM, OK),
    ("- - - X -", 2, ALARM, RETAIN, ALARM, OK),
]
COLUMNS = ("missing", "ignore", "breaching", "notBreaching")


def table_cases() -> list[Any]:
    cases = []
    for m, table in ((3, THREE_OF_THREE), (2, TWO_OF_THREE)):
        for data, _filled, *states in table:
            for treatment, expected in zip(COLUMNS, states, strict=True):
                for current in STATES:
                    cases.append(
                        pytest.param(
                            m,
                            data,
                            treatment,
                            current,
                            current if expected == RETAIN else expected,
                            id=f"{m}of3[{data}]-{treatment}-from-{current}",
                        )
                    )
    return cases


@pytest.mark.parametrize(("m", "data", "treatment", "current", "expected"), table_cases())
def test_missing_data_tables(
    m: int, data: str, treatment: str, current: str, expected: str
) -> None:
    """Every cell of both tables of MISSING, from every state the alarm could be in."""
    alarm = spec(datapoints_to_alarm=m, treat_missing=treatment)
    assert assess_range(alarm, pattern(data), current).state == expected


@pytest.mark.parametrize(
    ("m", "data", "filled"),
    [(3, row[0], row[1]) for row in THREE_OF_THREE] + [(2, row[0], row[1]) for row in TWO_OF_THREE],
)
def test_how_many_datapoints_must_be_filled(m: int, data: str, filled: int) -> None:
    """Column 2 of the tables: "how many of the 3 necessary data points are missing ... the
    number of data points that must be 'filled in'" (MISSING)."""
    for treatment in TREATMENTS:
        alarm = spec(datapoints_to_alarm=m, treat_missing=treatment)
        assert assess_range(alarm, pattern(data), OK).filled == filled


def test_a_full_range_decides_on_the_most_recent_evaluation_periods_only() -> None:
    """MISSING: "If no data points in the evaluation range are missing, CloudWatch evaluates the
    alarm based on the most recent data points collected ... The extra data points from
    farther back in the evaluation range are not needed and are ignored." Both breaching points
    of "X X 0 0 0" are outside the last three."""
    for treatment in TREATMENTS:
        alarm = spec(datapoints_to_alarm=2, treat_missing=treatment)
        assert assess_range(alarm, pattern("X X 0 0 0"), ALARM).state == OK
        assert assess_range(alarm, pattern("0 0 X 0 X"), OK).state == ALARM


def test_enough_real_datapoints_make_the_treatment_irrelevant() -> None:
    """MISSING: with at least Evaluation Periods real data points in the range, "CloudWatch
    evaluates the alarm state based on the most recent real data points ... the value you set
    for how to treat missing data is not needed and is ignored"."""
    for data, expected in (("X - X - X", ALARM), ("X - 0 X X", OK), ("X X - - X", ALARM)):
        states = {
            assess_range(spec(treat_missing=treatment), pattern(data), current).state
            for treatment in TREATMENTS
            for current in STATES
        }
        assert states == {expected}, data


# --- MISSING, "Avoiding premature transitions to alarm state" ---------------------------------


@pytest.mark.parametrize("data", ["- - - - X", "- - - X -"])
@pytest.mark.parametrize("current", [OK, INSUFFICIENT_DATA])
def test_a_recent_lone_breach_does_not_alarm_prematurely(data: str, current: str) -> None:
    """ "the alarm does not go immediately into ALARM state when the data is either - - - - X or
    - - - X - and Datapoints to Alarm is 3"."""
    assert assess_range(spec(), pattern(data), current).state != ALARM


@pytest.mark.parametrize("data", ["- - - X 0", "- - X - 0"])
def test_the_next_non_breaching_datapoint_then_gives_ok(data: str) -> None:
    """ "This way, false positives are avoided when the next data point is non-breaching and
    causes the data to be - - - X O or - - X - O"."""
    assert assess_range(spec(), pattern(data), INSUFFICIENT_DATA).state == OK


def test_a_breach_followed_only_by_missing_data_alarms_even_when_missing() -> None:
    """ "if the last few data points are - - X - -, the alarm goes into ALARM state even if
    missing data points are treated as missing", M = 3 and, for M out of N, "- - - X -" with
    M = 2 (row 5 of both tables)."""
    assert assess_range(spec(), pattern("- - X - -"), OK).state == ALARM
    assert assess_range(spec(datapoints_to_alarm=2), pattern("- - - X -"), OK).state == ALARM


def test_premature_alarm_timeline() -> None:
    """The same rule replayed: one breaching datapoint, then nothing (N = M = 3, range 5,
    missing). The alarm stays in INSUFFICIENT_DATA while the data is "- - - - X" and
    "- - - X -", goes to ALARM at "- - X - -" (the breach is then 3 periods old), and back to
    INSUFFICIENT_DATA when "all data points in the alarm evaluation range are missing"."""
    points = [(T0 + 30, 1.0)]  # stored at T0; first in a window ending at T0 + 60
    got = evaluate(spec(), points, start=T0, end=T0 + 3_000, evaluation_range=5)
    # The breach is in period k (k + 1 periods old) from T0 + 60 + 300 k; it leaves the five
    # period range at T0 + 60 + 5 * 300.
    assert got == transitions(
        (T0 + 60 + 2 * 300, INSUFFICIENT_DATA, ALARM),
        (T0 + 60 + 5 * 300, ALARM, INSUFFICIENT_DATA),
    )


def test_premature_alarm_timeline_avoided_by_a_non_breaching_datapoint() -> None:
    """ "- - - X O": the non-breaching datapoint of the next period arrives, no ALARM."""
    points = [(T0 + 30, 1.0), (T0 + 330, 0.0)]
    got = evaluate(spec(), points, start=T0, end=T0 + 3_000, evaluation_range=5)
    assert got[0] == Transition(at=T0 + 360.0, old=INSUFFICIENT_DATA, new=OK)
    assert all(change.new != ALARM for change in got)


def test_breaching_missing_data_alarms_once_the_good_datapoint_leaves_the_range() -> None:
    """MISSING, second row of the first table, breaching: "the alarm stays OK even if missing
    data is treated as breaching, because the one existing data point is not breaching ... The
    next time this alarm is evaluated, if the data is still missing it will go to ALARM, as that
    non-breaching data point will no longer be in the evaluation range"."""
    alarm = spec(treat_missing="breaching")
    points = [(T0 - 60, 0.0)]
    got = evaluate(alarm, points, start=T0, end=T0 + 3_000, evaluation_range=5)
    # At T0 the range is "- - - - 0"; the datapoint is in it until T0 + 1440 ("0 - - - -") and
    # out of it from T0 + 1500 ("- - - - -").
    assert got == transitions((T0, INSUFFICIENT_DATA, OK), (T0 + 1_500, OK, ALARM))


# --- EVAL: M out of N, the figure, the sliding window, the evaluation frequency ----------------


def test_m_out_of_n_breaches_need_not_be_consecutive() -> None:
    """EVAL: "The breaching data points don't have to be consecutive, but they must all be
    within the last number of data points equal to Evaluation Period." PUT's static threshold
    example: CPUUtilization Average "goes over 40% for three out of four periods" (Period 60,
    EvaluationPeriods 4, DatapointsToAlarm 3)."""
    alarm = spec(
        period=60,
        evaluation_periods=4,
        datapoints_to_alarm=3,
        threshold=40,
        statistic="Average",
    )
    assert assess_range(alarm, [50.0, 30.0, 50.0, 50.0], OK).state == ALARM
    assert assess_range(alarm, [50.0, 30.0, 50.0, 30.0], OK).state == OK
    assert assess_range(alarm, [50.0, 50.0, 50.0, 30.0, 30.0], OK).state == OK
    assert assess_range(alarm, [40.0, 40.0, 41.0, 40.0], OK).state == OK

    per_minute = [50.0, 30.0, 50.0, 50.0]
    points = [(T0 + MINUTE * i + 5, value) for i, value in enumerate(per_minute)]
    got = evaluate(alarm, points, start=T0, end=T0 + 4 * MINUTE)
    # At T0 + 60 the one real datapoint breaches but is too recent for a premature ALARM; from
    # T0 + 120 the range holds a non-breaching one and fewer than 3 breaching ones: OK. At
    # T0 + 240 the four minutes hold 50, 30, 50, 50: 3 of 4 breach.
    assert got == transitions((T0 + 120, INSUFFICIENT_DATA, OK), (T0 + 240, OK, ALARM))


def test_the_figure_of_alarm_evaluation() -> None:
    """EVAL's figure: threshold 3, Evaluation Periods and Datapoints to Alarm 3. "when all
    existing data points in the most recent three consecutive periods are above the threshold,
    the alarm goes to ALARM state. In the figure, this happens in the third through fifth time
    periods. At period six, the value dips below the threshold ... and the alarm state changes
    back to OK. During the ninth time period, the threshold is breached again, but for only one
    period. Consequently, the alarm state remains OK." One datapoint in the last minute of each
    5-minute period."""
    alarm = spec(threshold=3)
    by_period = [1.0, 2.0, 4.0, 5.0, 4.0, 2.0, 1.0, 2.0, 4.0, 2.0]
    points = [(T0 + 300 * (i + 1) - 45, value) for i, value in enumerate(by_period)]
    got = evaluate(alarm, points, start=T0, end=T0 + 3_000)
    assert got == transitions(
        (T0 + 300, INSUFFICIENT_DATA, OK),  # end of period 1: one real, non-breaching point
        (T0 + 5 * 300, OK, ALARM),  # end of period 5
        (T0 + 6 * 300, ALARM, OK),  # end of period 6
    )


def test_the_window_slides_every_minute() -> None:
    """EVAL: "if the Period is 5 minutes (300 seconds) and Evaluation Periods is 1, then at the
    end of minute 5 the alarm evaluates based on data from minutes 1 to 5. Then at the end of
    minute 6, the alarm is evaluated based on the data from minutes 2 to 6." WINDOW: "an alarm
    with a 1-hour period and 1 evaluation period might evaluate the time range 13:07-14:07 on
    one evaluation and 13:08-14:08 on the next". A breach in minute 1 and a non-breaching value
    in minute 6."""
    alarm = spec(evaluation_periods=1)
    got = evaluate(alarm, [(T0 + 10, 1.0), (T0 + 310, 0.0)], start=T0, end=T0 + 600)
    # At the end of minute 1 the window [T0 - 240, T0 + 60) holds the breach; at the end of
    # minute 6 the window [T0 + 60, T0 + 360) holds only the minute 6 value.
    assert got == transitions((T0 + 60, INSUFFICIENT_DATA, ALARM), (T0 + 360, ALARM, OK))


def test_an_hourly_period_slides_by_the_minute() -> None:
    """WINDOW's example: a 1-hour period evaluated 13:07-14:07, then 13:08-14:08. A breach at
    13:07:30 is in the first window and not in the one ending at 14:08."""
    alarm = spec(period=3_600, evaluation_periods=1, treat_missing="notBreaching")
    breach = T0 + 13 * 3_600 + 7 * 60 + 30
    got = evaluate(
        alarm, [(breach, 1.0)], start=T0 + 14 * 3_600, end=T0 + 15 * 3_600, evaluation_range=1
    )
    assert got == transitions(
        (T0 + 14 * 3_600, INSUFFICIENT_DATA, ALARM),
        (T0 + 14 * 3_600 + 8 * 60, ALARM, OK),
    )


@pytest.mark.parametrize("period", [10, 20, 30])
def test_high_resolution_alarms_are_evaluated_every_ten_seconds(period: int) -> None:
    """EVAL: "If the alarm period is 10 seconds, 20 seconds, or 30 seconds, the alarm is
    evaluated every 10 seconds." A high-resolution breach at T0 + 15 s is first in a window at
    T0 + 20 s, not at the next minute."""
    alarm = spec(period=period, evaluation_periods=1, treat_missing="notBreaching")
    got = evaluate(alarm, [(T0 + 15, 1.0)], start=T0 + 10, end=T0 + 60, evaluation_range=1)
    assert got[0] == Transition(at=T0 + 10.0, old=INSUFFICIENT_DATA, new=OK)
    assert got[1] == Transition(at=T0 + 20.0, old=OK, new=ALARM)


def test_evaluation_frequencies() -> None:
    """EVAL: every minute for periods of a minute or more, every 10 s for 10, 20 and 30 s
    periods, "once per hour" when "the number of evaluation periods multiplied by the length of
    each evaluation period exceeds one day"."""
    assert evaluation_interval(spec(period=60, evaluation_periods=1_440)) == 60
    assert evaluation_interval(spec(period=3_600, evaluation_periods=24)) == 60
    assert evaluation_interval(spec(period=3_600, evaluation_periods=25)) == 3_600
    assert evaluation_interval(spec(period=86_400, evaluation_periods=7)) == 3_600
    for period in (10, 20, 30):
        assert evaluation_interval(spec(period=period, evaluation_periods=1)) == 10


def test_the_multi_day_alarm_example() -> None:
    """EVAL, "Example of evaluating a multi-day alarm": "a job that runs every 3 days at 10:00.
    At 10:02, the job fails. At 10:03, the alarm evaluates and stays in OK state, because the
    evaluation considers data only up to 10:00. At 11:03, the alarm considers data up to 11:00
    and goes into ALARM state. At 11:43, you correct the error and the job now runs
    successfully. At 12:03, the alarm evaluates again, sees the successful job, and returns to
    OK state." Modelled with a JobSucceeded metric (1 success, 0 failure), Maximum < 1 over one
    3-day period; transitions are stamped with the hour the data was considered up to."""
    alarm = spec(
        period=3 * 86_400,
        evaluation_periods=1,
        threshold=1,
        comparison="LessThanThreshold",
        treat_missing="breaching",
    )
    day3 = T0 + 3 * 86_400
    points = [(T0 + 10 * 3_600 + 60, 1.0), (day3 + 10 * 3_600 + 120, 0.0)]
    points.append((day3 + 11 * 3_600 + 43 * 60, 1.0))
    got = evaluate(alarm, points, start=T0 + 10 * 3_600 + 30 * 60, end=day3 + 13 * 3_600)
    assert got == transitions(
        (T0 + 11 * 3_600, INSUFFICIENT_DATA, OK),
        (day3 + 11 * 3_600, OK, ALARM),
        (day3 + 12 * 3_600, ALARM, OK),
    )


def test_datapoints_from_before_the_alarm_was_created_are_used() -> None:
    """EVAL, Note: "If data points are missing soon after you create an alarm, and the metric
    was being reported to CloudWatch before you created the alarm, CloudWatch retrieves the
    most recent data points from before the alarm was created". PUT: "When this operation
    creates an alarm, the alarm state is immediately set to INSUFFICIENT_DATA. The alarm is
    then evaluated and its state is set appropriately"."""
    alarm = spec(evaluation_periods=1)
    got = evaluate(alarm, [(T0 - 400, 1.0)], start=T0, end=T0 + 60)
    assert got == transitions((T0, INSUFFICIENT_DATA, ALARM))


# --- The evaluation range and the data that has stopped -----------------------------------


@pytest.mark.parametrize(
    ("treatment", "after"),
    [("missing", INSUFFICIENT_DATA), ("notBreaching", OK), ("breaching", None), ("ignore", None)],
)
def test_the_last_datapoints_are_re_evaluated_until_they_leave_the_range(
    treatment: str, after: str | None
) -> None:
    """MISSING, Note: "CloudWatch alarms might repeatedly re-evaluate the last set of data
    points for a period of time after the metric has stopped flowing". With N = 1 the last real
    datapoint decides while it is in the range (N + 2 = 3 one-minute periods by default); then
    every datapoint is missing and the treatment decides ("breaching" and "ignore" keep ALARM)."""
    alarm = spec(period=60, evaluation_periods=1, treat_missing=treatment)
    assert default_evaluation_range(alarm) == 3
    got = evaluate(alarm, [(T0 + 10, 1.0)], start=T0 + 60, end=T0 + 3_600)
    expected = [(T0 + 60, INSUFFICIENT_DATA, ALARM)]
    if after is not None:
        expected.append((T0 + 60 + 3 * 60, ALARM, after))
    assert got == transitions(*expected)

    shorter = evaluate(alarm, [(T0 + 10, 1.0)], start=T0 + 60, end=T0 + 3_600, evaluation_range=1)
    if after is not None:
        assert shorter[-1] == Transition(at=T0 + 120.0, old=ALARM, new=after)


def test_older_real_datapoints_stand_in_for_missing_recent_ones() -> None:
    """MISSING: with enough real datapoints in the range, CloudWatch evaluates "the most recent
    real data points that were successfully retrieved, including the necessary extra data
    points from farther back in the evaluation range". "0 X X - X" is ALARM even though the
    most recent three periods hold only two datapoints."""
    alarm = spec(treat_missing="notBreaching")
    marks = pattern("0 X X - X")
    points = [(T0 + 300 * i + 10, value) for i, value in enumerate(marks) if value is not None]
    got = evaluate(alarm, points, start=T0 + 1_500, end=T0 + 1_500, evaluation_range=5)
    assert got == transitions((T0 + 1_500, INSUFFICIENT_DATA, ALARM))


# --- STATS and the comparison operators -------------------------------------------------------


def test_statistics_definitions() -> None:
    """STATS: "SampleCount is the number of data points during the period", "Sum is the sum of
    the values", "Average is the value of Sum/SampleCount", "Minimum is the lowest value",
    "Maximum is the highest value"."""
    values = [1.0, 2.0, 6.0]
    assert aggregate("SampleCount", values) == 3
    assert aggregate("Sum", values) == 9
    assert aggregate("Average", values) == 3
    assert aggregate("Minimum", values) == 1
    assert aggregate("Maximum", values) == 6
    assert aggregate("Sum", [0.1] * 10) == 1.0  # a plain float sum gives 0.9999999999999999
    with pytest.raises(ValueError, match="missing"):
        aggregate("Sum", [])


@pytest.mark.parametrize(
    ("statistic", "threshold", "comparison", "expected"),
    [
        # Datapoints 1 (minute 0), 2 (minute 1) and 6 (minute 4); windows [t - 300, t) hold
        # {1} at T0 + 60, {1, 2} until T0 + 240, {1, 2, 6} at T0 + 300, {2, 6} at T0 + 360.
        (
            "SampleCount",
            3,
            "GreaterThanOrEqualToThreshold",
            [(60, INSUFFICIENT_DATA, OK), (300, OK, ALARM), (360, ALARM, OK)],
        ),
        (
            "Sum",
            9,
            "GreaterThanOrEqualToThreshold",
            [(60, INSUFFICIENT_DATA, OK), (300, OK, ALARM), (360, ALARM, OK)],
        ),
        (
            "Average",
            3,
            "GreaterThanOrEqualToThreshold",
            [(60, INSUFFICIENT_DATA, OK), (300, OK, ALARM)],
        ),
        (
            "Minimum",
            1,
            "LessThanOrEqualToThreshold",
            [(60, INSUFFICIENT_DATA, ALARM), (360, ALARM, OK)],
        ),
        (
            "Maximum",
            6,
            "GreaterThanOrEqualToThreshold",
            [(60, INSUFFICIENT_DATA, OK), (300, OK, ALARM)],
        ),
    ],
)
def test_each_statistic_aggregates_a_period(
    statistic: str, threshold: float, comparison: str, expected: list[tuple[int, str, str]]
) -> None:
    """STATS, applied to the sliding 5-minute period of EVAL; N = 1."""
    alarm = spec(
        evaluation_periods=1, statistic=statistic, threshold=threshold, comparison=comparison
    )
    points = [(T0 + 10, 1.0), (T0 + 70, 2.0), (T0 + 250, 6.0)]
    got = evaluate(alarm, points, start=T0 + 60, end=T0 + 360)
    assert got == transitions(*((T0 + at, old, new) for at, old, new in expected))


@pytest.mark.parametrize(
    ("comparison", "below", "equal", "above"),
    [
        ("GreaterThanOrEqualToThreshold", False, True, True),
        ("GreaterThanThreshold", False, False, True),
        ("LessThanThreshold", True, False, False),
        ("LessThanOrEqualToThreshold", True, True, False),
    ],
)
def test_comparison_operators(comparison: str, below: bool, equal: bool, above: bool) -> None:
    """PUT, ComparisonOperator: "The arithmetic operation to use when comparing the specified
    statistic and threshold. The specified statistic value is used as the first operand."."""
    alarm = spec(comparison=comparison, threshold=10, evaluation_periods=1)
    assert (alarm.breaches(9.5), alarm.breaches(10.0), alarm.breaches(10.5)) == (
        below,
        equal,
        above,
    )
    for value, breaching in ((9.5, below), (10.0, equal), (10.5, above)):
        assert assess_range(alarm, [value], INSUFFICIENT_DATA).state == (ALARM if breaching else OK)


# --- Actions follow transitions -----------------------------------------------------------


def test_only_changes_of_state_are_reported() -> None:
    """ALARMS: "An alarm invokes actions only when the alarm changes state"; PUT: OKActions run
    when the alarm "transitions to an OK state from any other state", INSUFFICIENT_DATA
    included. A day of steady breaching gives one transition."""
    alarm = spec(period=60, evaluation_periods=1)
    points = [(T0 + 60 * i, 1.0) for i in range(1_440)]
    assert evaluate(alarm, points, start=T0, end=T0 + 86_400 - 60) == transitions(
        (T0 + 60, INSUFFICIENT_DATA, ALARM)
    )
    quiet = [(T0 + 60 * i, 0.0) for i in range(10)]
    assert evaluate(alarm, quiet, start=T0, end=T0 + 600) == transitions(
        (T0 + 60, INSUFFICIENT_DATA, OK)
    )


def test_ignore_keeps_the_initial_state_without_data() -> None:
    """MISSING: "ignore - The current alarm state is maintained": an alarm that never sees data
    stays INSUFFICIENT_DATA (its state at creation, PUT); breaching goes to ALARM at once."""
    assert evaluate(spec(treat_missing="ignore"), [], start=T0, end=T0 + 86_400) == []
    assert evaluate(spec(treat_missing="breaching"), [], start=T0, end=T0 + 60) == transitions(
        (T0, INSUFFICIENT_DATA, ALARM)
    )


def test_dynamodb_metrics_always_ignore_missing_data() -> None:
    """PUT, TreatMissingData: "Alarms that evaluate metrics in the AWS/DynamoDB namespace always
    ignore missing data even if you choose a different option for TreatMissingData": no ALARM
    without data, and ALARM kept after the last datapoint has left the range."""
    alarm = spec(evaluation_periods=1, treat_missing="breaching", namespace="AWS/DynamoDB")
    assert alarm.effective_treat_missing == "ignore"
    assert evaluate(alarm, [], start=T0, end=T0 + 3_600) == []
    points = [(T0 + 10, 1.0)]
    assert evaluate(alarm, points, start=T0, end=T0 + 86_400) == transitions(
        (T0 + 60, INSUFFICIENT_DATA, ALARM)
    )


# --- Time stamps --------------------------------------------------------------------------


def test_storage_resolution_does_not_move_datapoints_between_periods() -> None:
    """DATUM, StorageResolution: 60 "specifies this metric as a regular-resolution metric,
    which CloudWatch stores at 1-minute resolution"; 1 stores it "with sub-minute resolution
    down to one second". Periods of a minute or more begin and end on minute boundaries (EVAL:
    evaluated "every minute", "at the end of minute 5"), so a datapoint stored to the minute
    falls in the same period as one stored to the second."""
    rng = random.Random(3)
    points = [(T0 + rng.uniform(0, 7_200), rng.choice([0.0, 1.0])) for _ in range(200)]
    for period in (60, 300):
        alarm = spec(period=period, evaluation_periods=2, datapoints_to_alarm=1)
        by_minute = evaluate(alarm, points, start=T0, end=T0 + 7_200, storage_resolution=60)
        by_second = evaluate(alarm, points, start=T0, end=T0 + 7_200, storage_resolution=1)
        assert by_minute == by_second
        assert by_minute


def test_a_datapoint_on_a_boundary_belongs_to_the_later_period() -> None:
    """Periods include their start and exclude their end, as GetMetricData's StartTime ("The
    value specified is inclusive") and EndTime ("The value specified is exclusive"): a
    datapoint stamped exactly T0 + 60 is not in the window ending at T0 + 60."""
    alarm = spec(period=60, evaluation_periods=1, treat_missing="notBreaching")
    got = evaluate(alarm, [(T0 + 60, 1.0)], start=T0 + 60, end=T0 + 120, evaluation_range=1)
    assert got == transitions((T0 + 60, INSUFFICIENT_DATA, OK), (T0 + 120, OK, ALARM))


# --- Validation -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("overrides", "field"),
    [
        ({"period": 45}, "Period"),
        ({"period": 0}, "Period"),
        ({"period": 90}, "Period"),
        ({"period": 60.0}, "Period"),
        ({"evaluation_periods": 0}, "EvaluationPeriods"),
        ({"datapoints_to_alarm": 0}, "DatapointsToAlarm"),
        ({"datapoints_to_alarm": 4}, "DatapointsToAlarm"),
        ({"period": 60, "evaluation_periods": 1_441}, "Period \\* EvaluationPeriods"),
        ({"period": 1_800, "evaluation_periods": 49}, "Period \\* EvaluationPeriods"),
        ({"period": 3_600, "evaluation_periods": 169}, "Period \\* EvaluationPeriods"),
        ({"period": 10, "evaluation_periods": 8_641}, "Period \\* EvaluationPeriods"),
        ({"comparison": "LessThanLowerOrGreaterThanUpperThreshold"}, "anomaly detection"),
        ({"comparison": "GreaterThan"}, "ComparisonOperator"),
        ({"statistic": "p99"}, "Statistic"),
        ({"statistic": "average"}, "Statistic"),
        ({"treat_missing": "notbreaching"}, "TreatMissingData"),
        ({"threshold": math.nan}, "Threshold"),
    ],
)
def test_invalid_specs_are_rejected(overrides: dict[str, Any], field: str) -> None:
    """PUT: Period "Valid values are 10, 20, 30, and any multiple of 60"; EvaluationPeriods and
    DatapointsToAlarm "Minimum value of 1", M within N (EVAL: "the number of data points within
    the Evaluation Periods"); "Period multiplied by EvaluationPeriods can't be more than 604,800
    seconds. For alarms with a period of less than one hour (3,600 seconds), the total
    evaluation period can't be longer than one day (86,400 seconds)"; the valid values of
    ComparisonOperator, Statistic and TreatMissingData."""
    with pytest.raises(ValueError, match=field):
        spec(**overrides)


@pytest.mark.parametrize(
    "overrides",
    [
        {"period": 10, "evaluation_periods": 8_640},
        {"period": 20, "evaluation_periods": 1},
        {"period": 30, "evaluation_periods": 1},
        {"period": 60, "evaluation_periods": 1_440},
        {"period": 3_600, "evaluation_periods": 168},
        {"period": 604_800, "evaluation_periods": 1},
        {"datapoints_to_alarm": 3},
        {"datapoints_to_alarm": 1},
    ],
)
def test_the_documented_limits_are_accepted(overrides: dict[str, Any]) -> None:
    """The limits of PUT are inclusive ("can't be more than")."""
    spec(**overrides)


def test_datapoints_to_alarm_defaults_to_evaluation_periods() -> None:
    """CFN, DatapointsToAlarm: "If you omit this parameter, CloudWatch uses the same value here
    that you set for EvaluationPeriods"."""
    assert spec(evaluation_periods=4).alarm_datapoints == 4
    assert spec(evaluation_periods=4, datapoints_to_alarm=2).alarm_datapoints == 2


# --- AlarmSpec.from_properties ----------------------------------------------------------------

TOKEN_EXPIRING = {
    "AlarmDescription": "The published service token expires soon",
    "Namespace": "CmsToken/stack",
    "MetricName": "ServiceTokenSecondsToExpiry",
    "Dimensions": [{"Name": "service", "Value": "cmstoken"}],
    "Statistic": "Minimum",
    "Period": "3600",
    "EvaluationPeriods": "3",
    "DatapointsToAlarm": "2",
    "Threshold": "7200",
    "ComparisonOperator": "LessThanThreshold",
    "TreatMissingData": "breaching",
    "AlarmActions": ["arn:aws:sns:us-east-1:123456789012:alarms"],
    "OKActions": ["arn:aws:sns:us-east-1:123456789012:alarms"],
}


def test_from_properties_reads_a_resolved_template_alarm() -> None:
    """CFN property names; numbers arrive as strings as CloudFormation passes them."""
    alarm = AlarmSpec.from_properties("ServiceTokenExpiringAlarm", TOKEN_EXPIRING)
    assert alarm == AlarmSpec(
        name="ServiceTokenExpiringAlarm",
        period=3_600,
        evaluation_periods=3,
        threshold=7_200.0,
        comparison="LessThanThreshold",
        statistic="Minimum",
        treat_missing="breaching",
        datapoints_to_alarm=2,
        namespace="CmsToken/stack",
    )


def test_from_properties_defaults() -> None:
    """CFN: TreatMissingData "If you omit this parameter, the default behavior of missing is
    used"; DatapointsToAlarm defaults to EvaluationPeriods."""
    properties = {
        "Statistic": "Sum",
        "Period": 300,
        "EvaluationPeriods": 2,
        "Threshold": 1,
        "ComparisonOperator": "GreaterThanOrEqualToThreshold",
        "EvaluationWindow": {"SlidingWindow": {}},
    }
    alarm = AlarmSpec.from_properties("a", properties)
    assert alarm.treat_missing == "missing"
    assert alarm.datapoints_to_alarm is None
    assert alarm.alarm_datapoints == 2


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"Metrics": [{"Id": "e1", "Expression": "m1 + m2"}]}, "metric math"),
        ({"ExtendedStatistic": "p99", "Statistic": None}, "ExtendedStatistic"),
        ({"ThresholdMetricId": "ad1"}, "anomaly detection"),
        ({"EvaluationCriteria": {"PromQLCriteria": {"Query": "up"}}}, "PromQL"),
        ({"WarmUpConfiguration": {"WarmUpPeriodDurationInMinutes": 30}}, "warm-up"),
        ({"EvaluationWindow": {"WallClockWindow": {"Timezone": "UTC"}}}, "EvaluationWindow"),
        ({"Period": None}, "Period"),
        ({"Statistic": None}, "Statistic"),
        ({"Threshold": None}, "Threshold"),
        ({"Period": "60.5"}, "Period"),
        ({"Period": "sixty"}, "Period"),
        ({"EvaluationPeriods": True}, "EvaluationPeriods"),
        ({"Threshold": "lots"}, "Threshold"),
        ({"Period": "45"}, "Period"),
        ({"DatapointsToAlarm": "4"}, "DatapointsToAlarm"),
        ({"TreatMissingData": "Breaching"}, "TreatMissingData"),
    ],
)
def test_from_properties_rejects(change: dict[str, Any], message: str) -> None:
    """What is not modelled is refused by name, as are invalid values."""
    properties = {
        key: value for key, value in {**TOKEN_EXPIRING, **change}.items() if value is not None
    }
    with pytest.raises(ValueError, match=message):
        AlarmSpec.from_properties("ServiceTokenExpiringAlarm", properties)


# --- evaluate's own arguments -------------------------------------------------------------------


def test_evaluate_rejects_what_it_cannot_model() -> None:
    """DATUM: values "must be in the range of -2^360 to 2^360. In addition, special values (for
    example, NaN, +Infinity, -Infinity) are not supported"; a 10 s period over 1-minute data
    depends on arrival times (PUT, Period); the range must hold Evaluation Periods periods."""
    alarm = spec()
    for bad in (math.nan, math.inf, -(2.0**361)):
        with pytest.raises(ValueError, match="finite"):
            evaluate(alarm, [(T0, bad)], start=T0, end=T0 + 60)
    with pytest.raises(ValueError, match="standard-resolution"):
        evaluate(spec(period=10, evaluation_periods=1), [], start=T0, end=T0, storage_resolution=60)
    with pytest.raises(ValueError, match="evaluation_range"):
        evaluate(alarm, [], start=T0, end=T0, evaluation_range=2)
    with pytest.raises(ValueError, match="storage_resolution"):
        evaluate(alarm, [], start=T0, end=T0, storage_resolution=5)
    with pytest.raises(ValueError, match="start"):
        evaluate(alarm, [], start=T0 + 1, end=T0)
    assert evaluate(alarm, [(T0, 1.0)], start=T0 + 1, end=T0 + 59) == []


# --- The replay equals an evaluation at every instant ------------------------------------------


def brute_force(
    alarm: AlarmSpec,
    points: Sequence[tuple[float, float]],
    *,
    start: int,
    end: int,
    size: int,
    resolution: int,
) -> list[Transition]:
    """Every evaluation at every instant, each period aggregated from scratch."""
    interval = evaluation_interval(alarm)
    stored = [(math.floor(ts / resolution) * resolution, value) for ts, value in points]
    state = INSUFFICIENT_DATA
    found = []
    instant = -(-start // interval) * interval
    while instant <= end:
        values: list[float | None] = []
        for k in reversed(range(size)):
            low, high = instant - (k + 1) * alarm.period, instant - k * alarm.period
            inside = [value for ts, value in stored if low <= ts < high]
            values.append(aggregate(alarm.statistic, inside) if inside else None)
        new = assess_range(alarm, values, state).state
        if new != state:
            found.append(Transition(at=float(instant), old=state, new=new))
            state = new
        instant += interval
    return found


def random_points(rng: random.Random, start: int, end: int, step: int) -> list[tuple[float, float]]:
    """Bursts and silences, with values on both sides of 5 and exactly 5."""
    points = []
    t = start
    rate = 0.5
    while t < end:
        if rng.random() < 0.05:
            rate = rng.choice([0.0, 0.1, 0.5, 1.0])
        if rng.random() < rate:
            for _ in range(rng.randint(1, 3)):
                value = rng.choice([0.0, 2.5, 5.0, 7.5, 10.0, rng.uniform(0, 10)])
                points.append((t + rng.uniform(0, step), value))
        t += step
    return points


def random_spec(rng: random.Random, period: int, most_periods: int) -> AlarmSpec:
    n = rng.randint(1, most_periods)
    return AlarmSpec(
        name="random",
        period=period,
        evaluation_periods=n,
        datapoints_to_alarm=rng.choice([None, rng.randint(1, n)]),
        threshold=rng.choice([2.5, 5.0, 7.5]) if rng.random() < 0.7 else rng.randint(1, 4),
        comparison=rng.choice(
            [
                "GreaterThanOrEqualToThreshold",
                "GreaterThanThreshold",
                "LessThanThreshold",
                "LessThanOrEqualToThreshold",
            ]
        ),
        statistic=rng.choice(STATISTICS),
        treat_missing=rng.choice(TREATMENTS),
    )


@pytest.mark.parametrize("seed", range(30))
def test_replay_equals_evaluating_every_minute(seed: int) -> None:
    """evaluate skips evaluations whose range holds the same datapoints as the previous one;
    the transitions must be those of evaluating at every instant."""
    rng = random.Random(seed)
    alarm = random_spec(rng, rng.choice([60, 120, 300, 600]), 4)
    start, end = T0, T0 + 6 * 3_600
    # Dense data makes evaluate compute every instant, sparse data only those where the range
    # changes; both must agree with the brute force.
    points = random_points(rng, start - 3_600, end, 60 if seed % 2 else 900)
    size = rng.choice([None, alarm.evaluation_periods, alarm.evaluation_periods + 4])
    expected = brute_force(
        alarm,
        points,
        start=start + 17,
        end=end,
        size=default_evaluation_range(alarm) if size is None else size,
        resolution=60,
    )
    assert evaluate(alarm, points, start=start + 17, end=end, evaluation_range=size) == expected


@pytest.mark.parametrize("seed", range(10))
def test_replay_equals_evaluating_every_ten_seconds(seed: int) -> None:
    rng = random.Random(1_000 + seed)
    alarm = random_spec(rng, rng.choice([10, 20, 30]), 5)
    points = random_points(rng, T0 - 120, T0 + 1_800, 5 if seed % 2 else 120)
    expected = brute_force(
        alarm, points, start=T0, end=T0 + 1_800, size=alarm.evaluation_periods + 2, resolution=1
    )
    assert evaluate(alarm, points, start=T0, end=T0 + 1_800) == expected


@pytest.mark.parametrize("seed", range(5))
def test_replay_equals_evaluating_every_hour(seed: int) -> None:
    rng = random.Random(2_000 + seed)
    alarm = replace(random_spec(rng, 3_600, 4), evaluation_periods=30, datapoints_to_alarm=None)
    points = random_points(rng, T0 - 40 * 3_600, T0 + 4 * 86_400, 1_800 if seed % 2 else 14_400)
    expected = brute_force(alarm, points, start=T0, end=T0 + 4 * 86_400, size=32, resolution=60)
    assert evaluate(alarm, points, start=T0, end=T0 + 4 * 86_400) == expected


def test_sixty_days_of_minute_data_replay_quickly() -> None:
    """60 simulated days of one datapoint a minute, evaluated every minute."""
    rng = random.Random(7)
    points = [(T0 + 60 * i + 1, rng.uniform(0, 10)) for i in range(60 * 1_440)]
    for statistic in ("Average", "Maximum"):
        alarm = spec(statistic=statistic, threshold=7, datapoints_to_alarm=2)
        began = time.perf_counter()
        evaluate(alarm, points, start=T0, end=T0 + 60 * 86_400)
        assert time.perf_counter() - began < 10


# --- Property-based versions, when hypothesis is installed --------------------------------------

if importlib.util.find_spec("hypothesis") is not None:  # pragma: no cover - optional
    hypothesis: Any = importlib.import_module("hypothesis")
    st: Any = importlib.import_module("hypothesis.strategies")
    _Test = TypeVar("_Test", bound=Callable[..., None])

    def given(**strategies: Any) -> Callable[[_Test], _Test]:
        return cast("Callable[[_Test], _Test]", hypothesis.given(**strategies))

    def settings(**options: Any) -> Callable[[_Test], _Test]:
        return cast("Callable[[_Test], _Test]", hypothesis.settings(**options))

    @settings(max_examples=200, deadline=None)
    @given(
        n=st.integers(1, 4),
        data=st.data(),
        treatment=st.sampled_from(TREATMENTS),
        current=st.sampled_from(STATES),
    )
    def test_property_real_datapoints_decide_alone(
        n: int, data: Any, treatment: str, current: str
    ) -> None:
        """MISSING: with N or more real datapoints the treatment "is not needed and is
        ignored", and the state is M-out-of-N over the most recent N real ones."""
        m = data.draw(st.integers(1, n))
        marks = data.draw(
            st.lists(st.sampled_from([0.0, 1.0, None]), min_size=n + 2, max_size=n + 2)
        )
        real = [value for value in marks if value is not None]
        hypothesis.assume(len(real) >= n)
        alarm = spec(evaluation_periods=n, datapoints_to_alarm=m, treat_missing=treatment)
        expected = ALARM if sum(value > 0.5 for value in real[-n:]) >= m else OK
        assert assess_range(alarm, marks, current).state == expected

    @settings(max_examples=50, deadline=None)
    @given(seed=st.integers(0, 2**32 - 1))
    def test_property_replay_equals_brute_force(seed: int) -> None:
        rng = random.Random(seed)
        alarm = random_spec(rng, rng.choice([60, 300]), 3)
        points = random_points(rng, T0 - 1_800, T0 + 3 * 3_600, 60)
        expected = brute_force(
            alarm,
            points,
            start=T0,
            end=T0 + 3 * 3_600,
            size=alarm.evaluation_periods + 2,
            resolution=60,
        )
        assert evaluate(alarm, points, start=T0, end=T0 + 3 * 3_600) == expected
