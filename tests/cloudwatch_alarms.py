"""A pure-Python model of how Amazon CloudWatch evaluates a *metric alarm* on a single metric
with a static threshold, so that tests can replay the datapoints our functions publish and
assert each alarm's state changes.

Out of scope, and refused by :meth:`AlarmSpec.from_properties` rather than approximated:
metric math (``Metrics``), percentiles and other extended statistics (``ExtendedStatistic``),
anomaly detection (``ThresholdMetricId`` and the band comparison operators), PromQL alarms
(``EvaluationCriteria``), wall clock evaluation windows (``EvaluationWindow.WallClockWindow``),
warm-up periods (``WarmUpConfiguration``) and composite alarms.

Every rule below comes from one of these documents; the docstrings cite them by title and
address where the rule is implemented.

* [EVAL] "Alarm evaluation", Amazon CloudWatch User Guide,
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-evaluation.html
  (until 2024 the "Evaluating an alarm" section of [ALARMS]).
* [MISSING] "Configuring how CloudWatch alarms treat missing data", Amazon CloudWatch User Guide,
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarms-and-missing-data.html
  (sections "How alarm state is evaluated when data is missing" and "Avoiding premature
  transitions to alarm state").
* [ALARMS] "Using Amazon CloudWatch alarms", Amazon CloudWatch User Guide,
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/AlarmThatSendsEmail.html
* [WINDOW] "Alarm evaluation window", Amazon CloudWatch User Guide,
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/alarm-evaluation-window.html
* [PUT] "PutMetricAlarm", Amazon CloudWatch API Reference,
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_PutMetricAlarm.html
* [STATS] "CloudWatch statistics definitions", Amazon CloudWatch User Guide,
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Statistics-definitions.html
* [CFN] "AWS::CloudWatch::Alarm", AWS CloudFormation Template Reference,
  https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-cloudwatch-alarm.html
* [DATUM] "MetricDatum", Amazon CloudWatch API Reference,
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_MetricDatum.html
* [GMD] "GetMetricData", Amazon CloudWatch API Reference,
  https://docs.aws.amazon.com/AmazonCloudWatch/latest/APIReference/API_GetMetricData.html

Where the documents are silent or contradict each other, the choice made is stated where it is
implemented and marked **Undocumented** or **Conflict**:

* the size of the evaluation range (:func:`default_evaluation_range`, a parameter of
  :func:`evaluate`);
* ``missing`` and ``ignore`` when some, but fewer than Evaluation Periods, real datapoints are in
  the range, and the premature-alarm rule, whose prose and tables disagree (:func:`assess_range`);
* that datapoints are visible to the alarm from their time stamp on (no ingestion delay), and
  that evaluations happen exactly on the minute, ten-second or hour boundary
  (:func:`evaluate`).
"""

from __future__ import annotations

import math
import operator
from bisect import bisect_left
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final

OK: Final = "OK"
ALARM: Final = "ALARM"
INSUFFICIENT_DATA: Final = "INSUFFICIENT_DATA"
STATES: Final = (OK, ALARM, INSUFFICIENT_DATA)

# [PUT] ComparisonOperator: the four static-threshold values; the other three valid values
# ("LessThanLowerOrGreaterThanUpperThreshold", "LessThanLowerThreshold",
# "GreaterThanUpperThreshold") "are used only for alarms based on anomaly detection models".
# "The specified statistic value is used as the first operand."
COMPARISONS: Final[Mapping[str, Callable[[float, float], bool]]] = {
    "GreaterThanOrEqualToThreshold": operator.ge,
    "GreaterThanThreshold": operator.gt,
    "LessThanThreshold": operator.lt,
    "LessThanOrEqualToThreshold": operator.le,
}
ANOMALY_DETECTION_COMPARISONS: Final = frozenset(
    {
        "LessThanLowerOrGreaterThanUpperThreshold",
        "LessThanLowerThreshold",
        "GreaterThanUpperThreshold",
    }
)
# [PUT] Statistic, "Valid Values: SampleCount | Average | Sum | Minimum | Maximum".
STATISTICS: Final = ("SampleCount", "Average", "Sum", "Minimum", "Maximum")
# [PUT] TreatMissingData, "Valid Values: breaching | notBreaching | ignore | missing".
TREATMENTS: Final = ("missing", "ignore", "breaching", "notBreaching")

# [PUT] Period: "Valid values are 10, 20, 30, and any multiple of 60."
HIGH_RESOLUTION_PERIODS: Final = (10, 20, 30)
ONE_HOUR: Final = 3_600
ONE_DAY: Final = 86_400
SEVEN_DAYS: Final = 604_800
# [DATUM] StorageResolution: "Valid values are 1 and 60."
STORAGE_RESOLUTIONS: Final = (1, 60)
# [DATUM] Value: "Values must be in the range of -2^360 to 2^360. In addition, special values
# (for example, NaN, +Infinity, -Infinity) are not supported."
MAX_ABS_VALUE: Final = 2.0**360

# Every double is an integer multiple of 2**-1074, so sums kept as integers in that unit are
# exact, and one true division rounds the exact total correctly.
_EXACT_SHIFT: Final = 1074
_EXACT_UNIT: Final = 1 << _EXACT_SHIFT


@dataclass(frozen=True)
class AlarmSpec:
    """The settings of one metric alarm that decide its state.

    Field values are those of the CloudFormation properties [CFN] and of PutMetricAlarm [PUT],
    and are validated as those documents state (``ValueError`` naming the property):

    * ``period`` (``Period``): "Valid values are 10, 20, 30, and any multiple of 60." [PUT]
      (The CloudFormation reference [CFN] lists "10, 30, 60, and any multiple of 60"; the API,
      which CloudFormation calls, also accepts 20, as do [EVAL] "High-resolution alarms".)
    * ``evaluation_periods`` (``EvaluationPeriods``, N) and ``datapoints_to_alarm``
      (``DatapointsToAlarm``, M): "Valid Range: Minimum value of 1." [PUT]. "Datapoints to Alarm
      is the number of data points within the Evaluation Periods that must be breaching" [EVAL],
      so M <= N. "If you omit this parameter, CloudWatch uses the same value here that you set
      for EvaluationPeriods" [CFN].
    * ``period * evaluation_periods``: "can't be more than 604,800 seconds. For alarms with a
      period of less than one hour (3,600 seconds), the total evaluation period can't be longer
      than one day (86,400 seconds)." [PUT] (Older copies of [ALARMS] say the product "can't
      exceed one day" for every alarm; the API reference and the multi-day alarms of [EVAL]
      are the current statement.)
    * ``comparison`` (``ComparisonOperator``), ``statistic`` (``Statistic``) and
      ``treat_missing`` (``TreatMissingData``, default ``missing`` [PUT]): the valid values
      listed in [PUT], less the anomaly-detection operators.
    * ``namespace`` (``Namespace``, optional): only consulted for the documented exception that
      "Alarms that evaluate metrics in the AWS/DynamoDB namespace always ignore missing data
      even if you choose a different option for TreatMissingData." [PUT], [MISSING].
    """

    name: str
    period: int
    evaluation_periods: int
    threshold: float
    comparison: str
    statistic: str
    treat_missing: str = "missing"
    datapoints_to_alarm: int | None = None
    namespace: str | None = None

    def __post_init__(self) -> None:
        if not _is_int(self.period) or not (
            self.period in HIGH_RESOLUTION_PERIODS or (self.period >= 60 and self.period % 60 == 0)
        ):
            raise ValueError(
                f"{self.name}: Period must be 10, 20, 30 or a multiple of 60 seconds "
                f"(PutMetricAlarm), got {self.period!r}"
            )
        if not _is_int(self.evaluation_periods) or self.evaluation_periods < 1:
            raise ValueError(
                f"{self.name}: EvaluationPeriods must be an integer of at least 1, "
                f"got {self.evaluation_periods!r}"
            )
        if self.datapoints_to_alarm is not None and (
            not _is_int(self.datapoints_to_alarm)
            or not 1 <= self.datapoints_to_alarm <= self.evaluation_periods
        ):
            raise ValueError(
                f"{self.name}: DatapointsToAlarm must be an integer from 1 to EvaluationPeriods "
                f"({self.evaluation_periods}), got {self.datapoints_to_alarm!r}"
            )
        total = self.period * self.evaluation_periods
        if total > SEVEN_DAYS:
            raise ValueError(
                f"{self.name}: Period * EvaluationPeriods can't be more than {SEVEN_DAYS} s "
                f"(PutMetricAlarm), got {total}"
            )
        if self.period < ONE_HOUR and total > ONE_DAY:
            raise ValueError(
                f"{self.name}: for a Period under {ONE_HOUR} s, Period * EvaluationPeriods "
                f"can't be more than {ONE_DAY} s (PutMetricAlarm), got {total}"
            )
        if isinstance(self.threshold, bool) or not isinstance(self.threshold, int | float):
            raise ValueError(f"{self.name}: Threshold must be a number, got {self.threshold!r}")
        if not math.isfinite(self.threshold):
            raise ValueError(f"{self.name}: Threshold must be finite, got {self.threshold!r}")
        if self.comparison not in COMPARISONS:
            detail = (
                " (an anomaly detection operator; anomaly detection alarms are not modelled)"
                if self.comparison in ANOMALY_DETECTION_COMPARISONS
                else ""
            )
            raise ValueError(
                f"{self.name}: ComparisonOperator must be one of {sorted(COMPARISONS)}, "
                f"got {self.comparison!r}{detail}"
            )
        if self.statistic not in STATISTICS:
            raise ValueError(
                f"{self.name}: Statistic must be one of {list(STATISTICS)} (percentiles and other "
                f"extended statistics are not modelled), got {self.statistic!r}"
            )
        if self.treat_missing not in TREATMENTS:
            raise ValueError(
                f"{self.name}: TreatMissingData must be one of {list(TREATMENTS)}, "
                f"got {self.treat_missing!r}"
            )

    @property
    def alarm_datapoints(self) -> int:
        """M: ``datapoints_to_alarm``, or N when it is omitted [CFN] ("If you omit this
        parameter, CloudWatch uses the same value here that you set for EvaluationPeriods")."""
        if self.datapoints_to_alarm is None:
            return self.evaluation_periods
        return self.datapoints_to_alarm

    @property
    def effective_treat_missing(self) -> str:
        """The treatment CloudWatch applies: ``ignore`` for any metric in ``AWS/DynamoDB``
        whatever was chosen ("PutMetricAlarm" [PUT], TreatMissingData; and [MISSING]),
        otherwise ``treat_missing``."""
        if self.namespace == "AWS/DynamoDB":
            return "ignore"
        return self.treat_missing

    def breaches(self, value: float) -> bool:
        """Whether one period's statistic breaches the threshold: "The arithmetic operation to
        use when comparing the specified statistic and threshold. The specified statistic value
        is used as the first operand." ("PutMetricAlarm" [PUT], ComparisonOperator)."""
        return COMPARISONS[self.comparison](value, self.threshold)

    @classmethod
    def from_properties(cls, name: str, properties: Mapping[str, Any]) -> AlarmSpec:
        """The spec of an ``AWS::CloudWatch::Alarm`` resource [CFN] from its ``Properties``,
        intrinsic functions already resolved.

        Numbers may arrive as strings, as CloudFormation passes them. ``Statistic`` is required
        here: [CFN] "For an alarm based on a metric, you must specify either Statistic or
        ExtendedStatistic but not both", and extended statistics are not modelled. Properties
        that select something this model does not implement raise ``ValueError`` naming them.
        Properties that do not affect the state (actions, descriptions, dimensions, ``Unit``,
        ``ActionsEnabled``, ``EvaluateLowSampleCountPercentile``, which applies to percentiles
        only [PUT]) are ignored; the datapoints given to :func:`evaluate` must be the ones the
        alarm's metric, dimensions and unit select.
        """
        unsupported = {
            "Metrics": "metric math alarms (Metrics) are not modelled",
            "ExtendedStatistic": "extended statistics such as percentiles (ExtendedStatistic) "
            "are not modelled",
            "ThresholdMetricId": "anomaly detection alarms (ThresholdMetricId) are not modelled",
            "EvaluationCriteria": "PromQL alarms (EvaluationCriteria) are not modelled",
            "WarmUpConfiguration": "alarm warm-up periods (WarmUpConfiguration) are not modelled",
        }
        for key, reason in unsupported.items():
            if properties.get(key) is not None:
                raise ValueError(f"{name}: {reason}")
        window = properties.get("EvaluationWindow")
        if window is not None and (
            not isinstance(window, Mapping) or set(window) - {"SlidingWindow"}
        ):
            raise ValueError(
                f"{name}: only the default sliding EvaluationWindow is modelled, got {window!r}"
            )
        for key in ("Period", "EvaluationPeriods", "Threshold", "ComparisonOperator", "Statistic"):
            if properties.get(key) is None:
                raise ValueError(f"{name}: the property {key} is required")
        datapoints = properties.get("DatapointsToAlarm")
        namespace = properties.get("Namespace")
        return cls(
            name=name,
            period=_integer(name, "Period", properties["Period"]),
            evaluation_periods=_integer(name, "EvaluationPeriods", properties["EvaluationPeriods"]),
            threshold=_number(name, "Threshold", properties["Threshold"]),
            comparison=str(properties["ComparisonOperator"]),
            statistic=str(properties["Statistic"]),
            treat_missing=str(properties.get("TreatMissingData") or "missing"),
            datapoints_to_alarm=(
                None if datapoints is None else _integer(name, "DatapointsToAlarm", datapoints)
            ),
            namespace=None if namespace is None else str(namespace),
        )


@dataclass(frozen=True)
class Transition:
    """A change of the alarm's state.

    ``at`` is the evaluation instant (epoch seconds) whose evaluation changed the state: the end
    of the evaluated window, see :func:`evaluate`. Actions follow transitions only: "An alarm
    invokes actions only when the alarm changes state" (except Auto Scaling actions), and
    AlarmActions / OKActions / InsufficientDataActions run when the alarm "transitions to the
    ALARM [OK, INSUFFICIENT_DATA] state from any other state" ("Using Amazon CloudWatch alarms"
    [ALARMS]; "PutMetricAlarm" [PUT]). So a transition from INSUFFICIENT_DATA to OK does run the
    OK actions.
    """

    at: float
    old: str
    new: str


@dataclass(frozen=True)
class Assessment:
    """The outcome of one evaluation of an evaluation range (see :func:`assess_range`).

    ``filled`` is the number of missing datapoints that had to be filled in to make up
    Evaluation Periods datapoints (column 2 of the tables in [MISSING]); ``rule`` names the
    branch of the documented algorithm that decided ``state``.
    """

    state: str
    filled: int
    rule: str


def aggregate(statistic: str, values: Sequence[float]) -> float:
    """One period's statistic over the datapoints that fall in it ("CloudWatch statistics
    definitions" [STATS]):

    * SampleCount "is the number of data points during the period";
    * Sum "is the sum of the values of the all data points collected during the period";
    * Average "is the value of Sum/SampleCount during the specified period";
    * Minimum "is the lowest value observed during the specified period";
    * Maximum "is the highest value observed during the specified period".

    A period without datapoints has no statistic: it is a *missing* datapoint, not zero
    ([MISSING]: each data point is breaching, not breaching, or missing), so ``values`` must not
    be empty. **Undocumented**: how CloudWatch rounds sums; they are computed exactly and
    rounded once, as ``math.fsum`` would.
    """
    if not values:
        raise ValueError("a period without datapoints has no statistic (it is missing)")
    if statistic == "SampleCount":
        return float(len(values))
    if statistic == "Minimum":
        return min(values)
    if statistic == "Maximum":
        return max(values)
    total = sum(_exact(v) for v in values)
    if statistic == "Sum":
        return total / _EXACT_UNIT
    if statistic == "Average":
        return total / (len(values) * _EXACT_UNIT)
    raise ValueError(f"Statistic must be one of {list(STATISTICS)}, got {statistic!r}")


def default_evaluation_range(spec: AlarmSpec) -> int:
    """How many periods CloudWatch retrieves at each evaluation: N + 2.

    [MISSING]: "CloudWatch attempts to retrieve a higher number of data points than the number
    specified as Evaluation Periods. The exact number of data points it attempts to retrieve
    depends on the length of the alarm period and whether it is based on a metric with standard
    resolution or high resolution." **Undocumented**: the only size the documents give is 5
    for Evaluation Periods 3 and a 5-minute period ("CloudWatch retrieves the 5 most recent
    data points ... 5 is the evaluation range for the alarm"); N + 2 extends that one example,
    and :func:`evaluate` takes ``evaluation_range`` to override it.
    """
    return spec.evaluation_periods + 2


def evaluation_interval(spec: AlarmSpec) -> int:
    """Seconds between two evaluations of the alarm ("Alarm evaluation" [EVAL]):

    * "For any period of one minute or longer, an alarm is evaluated every minute";
    * "If the alarm period is 10 seconds, 20 seconds, or 30 seconds, the alarm is evaluated
      every 10 seconds";
    * "If the number of evaluation periods multiplied by the length of each evaluation period
      exceeds one day, the alarm is evaluated once per hour" (a multi-day alarm).
    """
    if spec.period < 60:
        return 10
    if spec.period * spec.evaluation_periods > ONE_DAY:
        return ONE_HOUR
    return 60


def assess_range(spec: AlarmSpec, values: Sequence[float | None], current: str) -> Assessment:
    """One evaluation: the new state from the evaluation range and the current state.

    ``values`` holds the statistic of each period of the evaluation range, oldest first, with
    ``None`` for a period without datapoints; it must cover at least Evaluation Periods (N)
    periods. M is :attr:`AlarmSpec.alarm_datapoints`. The algorithm is the one documented in
    "Configuring how CloudWatch alarms treat missing data" [MISSING], section "How alarm state
    is evaluated when data is missing":

    1. "If no data points in the evaluation range are missing, CloudWatch evaluates the alarm
       based on the most recent data points collected. The number of data points evaluated is
       equal to the Evaluation Periods"; and 2. "If some data points in the evaluation range
       are missing, but the total number of existing data points that were successfully
       retrieved from the evaluation range is equal to or more than the alarm's Evaluation
       Periods, CloudWatch evaluates the alarm state based on the most recent real data points
       ... the value you set for how to treat missing data is not needed and is ignored."
       Rule ``"real datapoints"``.
    3. "If some data points in the evaluation range are missing, and the number of actual data
       points that were retrieved is lower than the alarm's number of Evaluation Periods,
       CloudWatch fills in the missing data points with the result you specified for how to
       treat missing data, and then evaluates the alarm. However, all real data points in the
       evaluation range are included in the evaluation. CloudWatch uses missing data points
       only as few times as possible." So N - (real datapoints) missing datapoints are filled.

    M out of N ([EVAL]): "Datapoints to Alarm is the number of data points within the
    Evaluation Periods that must be breaching to cause the alarm to go to the ALARM state. The
    breaching data points don't have to be consecutive". Of the N evaluated datapoints, M or
    more breaching gives ALARM, fewer gives OK.

    Filling by treatment ([MISSING]: "notBreaching - Missing data points are treated as 'good'
    and within the threshold"; "breaching - Missing data points are treated as 'bad' and
    breaching the threshold"; "ignore - The current alarm state is maintained"; "missing - If
    all data points in the alarm evaluation range are missing, the alarm transitions to
    INSUFFICIENT_DATA"):

    * no real datapoint in the range: ``missing`` gives INSUFFICIENT_DATA, ``ignore`` keeps the
      current state, ``breaching`` ALARM, ``notBreaching`` OK (row "- - - - -" of both tables).
      Rule ``"all missing"``.
    * ``breaching`` / ``notBreaching`` with some real datapoints: the filled datapoints count
      as breaching / not breaching. Rule ``"filled"``.
    * ``missing`` / ``ignore`` with some real datapoints (fewer than N). **Conflict**: the
      prose of "Avoiding premature transitions to alarm state" says "alarms are designed to
      always go into ALARM state when the oldest available breaching datapoint during the
      Evaluation Periods number of data points is at least as old as the value of Datapoints to
      Alarm, and all other more recent data points are breaching or missing", and, for M out of
      N alarms, "If the oldest breaching data point during the evaluation range is at least as
      old as the value of Datapoints to Alarm, and all of the more recent data points are either
      breaching or missing, the alarm goes into ALARM state no matter the value of M". But the
      second table's row "0 - X - -" (M=2, N=3) satisfies that wording and is documented as OK
      for both MISSING and IGNORE. The rule implemented reproduces every row of both tables and
      every example of that section:

      - M or more real datapoints breach: ALARM. **Inferred** (no example has this): every way
        of filling the missing datapoints gives ALARM. Rule ``"real datapoints"``.
      - Otherwise, if any real datapoint in the range is not breaching: OK. This generalises
        the MISSING and IGNORE cells of the rows "0 - - - -" (M=3), "0 - X - -" and
        "- - - - 0" (M=2), the only rows with a non-breaching real datapoint and fewer than N
        real ones; it takes precedence over the premature-alarm wording, as the row
        "0 - X - -" requires. Rule ``"filled"``.
      - Otherwise (every real datapoint breaches, fewer than M): for ``missing``, ALARM when the
        oldest breaching datapoint is in a period at least M periods old, the newest period
        being 1 period old (rows "- - X - -" with M=3 and "- - - X -" with M=2: "the alarm goes
        into ALARM state even if missing data points are treated as missing"). Rule
        ``"premature alarm"``. Else, for ``missing``, **Undocumented**: the documents only say
        "the alarm does not go immediately into ALARM state when the data is either - - - - X
        or - - - X -"; the state is kept. For ``ignore`` the state is kept (IGNORE column of
        the same rows: "Retain current state"). Rule ``"retained"``.
    """
    n = spec.evaluation_periods
    m = spec.alarm_datapoints
    if len(values) < n:
        raise ValueError(
            f"{spec.name}: the evaluation range has {len(values)} periods, fewer than "
            f"EvaluationPeriods ({n})"
        )
    if current not in STATES:
        raise ValueError(f"unknown alarm state {current!r}")
    flags = [None if value is None else spec.breaches(value) for value in values]
    real = [flag for flag in flags if flag is not None]
    if len(real) >= n:
        breaching = sum(real[-n:])
        return Assessment(ALARM if breaching >= m else OK, 0, "real datapoints")

    treatment = spec.effective_treat_missing
    filled = n - len(real)
    if not real:
        outcome = {
            "missing": INSUFFICIENT_DATA,
            "ignore": current,
            "breaching": ALARM,
            "notBreaching": OK,
        }[treatment]
        return Assessment(outcome, filled, "all missing")

    breaching = sum(real)
    if treatment == "breaching":
        return Assessment(ALARM if breaching + filled >= m else OK, filled, "filled")
    if treatment == "notBreaching":
        return Assessment(ALARM if breaching >= m else OK, filled, "filled")
    if breaching >= m:
        return Assessment(ALARM, filled, "real datapoints")
    if not all(real):
        return Assessment(OK, filled, "filled")
    if treatment == "missing":
        oldest = next(index for index, flag in enumerate(flags) if flag is not None)
        if len(flags) - oldest >= m:
            return Assessment(ALARM, filled, "premature alarm")
    return Assessment(current, filled, "retained")


def evaluate(
    spec: AlarmSpec,
    datapoints: Iterable[tuple[float, float]],
    *,
    start: float,
    end: float,
    evaluation_range: int | None = None,
    storage_resolution: int | None = None,
) -> list[Transition]:
    """Replay the alarm's evaluations from start to end (epoch seconds) over the raw datapoints
    (timestamp, value) published to its metric; return the state changes in order.

    The alarm is created at ``start``: "When this operation creates an alarm, the alarm state is
    immediately set to INSUFFICIENT_DATA. The alarm is then evaluated and its state is set
    appropriately." ("PutMetricAlarm" [PUT]). Datapoints from before ``start`` take part, as
    "CloudWatch retrieves the most recent data points from before the alarm was created"
    ("Alarm evaluation" [EVAL], Note).

    When: evaluations happen every :func:`evaluation_interval` seconds ([EVAL]), at the
    instants ``t`` that are multiples of that interval (epoch seconds), with
    ``start <= t <= end``. **Undocumented**: the exact instant within the minute (or hour) at
    which CloudWatch runs. [EVAL] evaluates "at the end of minute 5", and a multi-day alarm
    "takes into account only the metrics up to the current hour at the :00 minute" (its
    example evaluates at 10:03 on data up to 10:00); the model evaluates at the boundary itself,
    so ``Transition.at`` is the end of the data the evaluation considered.

    Which data: the default sliding window ([WINDOW]: "If you don't specify EvaluationWindow
    ... the alarm uses a sliding window"; "an alarm with a 1-hour period and 1 evaluation
    period might evaluate the time range 13:07-14:07 on one evaluation and 13:08-14:08 on the
    next"; [EVAL]: "at the end of minute 5 the alarm evaluates based on data from minutes 1 to
    5. Then at the end of minute 6 ... minutes 2 to 6"). Period ``k`` (0 the most recent) of the
    evaluation at ``t`` holds the datapoints time stamped in ``[t - (k+1)P, t - kP)``: start
    inclusive and end exclusive as in "GetMetricData" [GMD] ("StartTime ... The value specified
    is inclusive", "EndTime ... The value specified is exclusive"). The evaluation range is
    ``evaluation_range`` such periods (default :func:`default_evaluation_range`); each period's
    statistic is :func:`aggregate`, and :func:`assess_range` decides the state.

    Time stamps: a standard-resolution datapoint is stored at one-minute resolution
    ("MetricDatum" [DATUM], StorageResolution: "Setting this to 60 specifies this metric as a
    regular-resolution metric, which CloudWatch stores at 1-minute resolution"), so its time
    stamp is truncated to the minute; a high-resolution one (``storage_resolution=1``) to the
    second. The default is 60 for periods of a minute or more and 1 for 10, 20 and 30 s
    periods. A high-resolution period over standard-resolution data ("the alarm might often
    lapse into INSUFFICENT_DATA status" [PUT], Period) is refused: its outcome depends on when
    the data arrives, which is not modelled. Values must be finite and within +-2**360
    ([DATUM], Value).

    **Undocumented / simplification**: a datapoint is visible to every evaluation after its
    time stamp: no ingestion delay, no late or back-dated data ("CloudWatch alarms check
    metrics based on the current time in UTC. Custom metrics sent to CloudWatch with time
    stamps other than the current UTC time can cause alarms to display the Insufficient Data
    state or result in delayed alarms", "Amazon CloudWatch concepts", Time stamps,
    https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/cloudwatch_concepts.html).
    Datapoints that arrive late are handled by CloudWatch with the premature-alarm logic of
    [MISSING], which :func:`assess_range` implements on the data as finally stored.

    Speed: the state can only change at an evaluation whose range holds different datapoints
    from the previous one (for the same data and the state it produced, :func:`assess_range`
    returns that state again), so only those evaluations are computed. The transitions are the
    same as evaluating at every instant.
    """
    resolution = (
        (1 if spec.period < 60 else 60) if storage_resolution is None else storage_resolution
    )
    if resolution not in STORAGE_RESOLUTIONS:
        raise ValueError(f"storage_resolution must be 1 or 60, got {storage_resolution!r}")
    if spec.period < 60 and resolution != 1:
        raise ValueError(
            f"{spec.name}: a {spec.period} s period over standard-resolution (60 s) data is not "
            "modelled"
        )
    size = default_evaluation_range(spec) if evaluation_range is None else evaluation_range
    if not _is_int(size) or size < spec.evaluation_periods:
        raise ValueError(
            f"{spec.name}: evaluation_range must be an integer of at least EvaluationPeriods "
            f"({spec.evaluation_periods}), got {evaluation_range!r}"
        )
    if not (math.isfinite(start) and math.isfinite(end)) or start > end:
        raise ValueError(f"start ({start!r}) must not be after end ({end!r})")

    interval = evaluation_interval(spec)
    period = spec.period
    slot = 10 if period < 60 else 60  # divides the period, the interval and the resolution
    first = math.ceil(start / interval) * interval
    last = math.floor(end / interval) * interval
    if first > last:
        return []

    series = _SlotSeries(spec.statistic, slot)
    earliest = first - size * period
    for timestamp, value in datapoints:
        if not math.isfinite(value) or abs(value) > MAX_ABS_VALUE:
            raise ValueError(
                f"datapoint value {value!r} at {timestamp!r}: values must be finite and within "
                "+-2**360 (MetricDatum)"
            )
        stored = math.floor(timestamp / resolution) * resolution
        if earliest <= stored < last:
            series.add(stored // slot, value)
    series.freeze()

    # The datapoints of slot s enter period j of the range at the first instant at or after
    # s + slot + j * period, and leave the range at the first one at or after
    # s + slot + size * period. Between such instants the range holds the same datapoints.
    # When there would be about as many such instants as instants, evaluate at every one.
    instants: Iterable[int]
    if len(series.slots) * (size + 1) >= (last - first) // interval:
        instants = range(first, last + 1, interval)
    else:
        changes = {first}
        for index in series.slots:
            entered = index * slot + slot
            for j in range(size + 1):
                instant = -(-(entered + j * period) // interval) * interval
                if first < instant <= last:
                    changes.add(instant)
        instants = sorted(changes)

    transitions: list[Transition] = []
    state = INSUFFICIENT_DATA
    for instant in instants:
        values = [
            series.statistic((instant - (k + 1) * period) // slot, (instant - k * period) // slot)
            for k in reversed(range(size))
        ]
        new = assess_range(spec, values, state).state
        if new != state:
            transitions.append(Transition(at=float(instant), old=state, new=new))
            state = new
    return transitions


class _SlotSeries:
    """Datapoints bucketed into fixed slots that every period boundary falls between, with
    prefix sums (and, for Minimum and Maximum, sparse tables) so that each period's statistic
    costs two bisections. Statistics are cached by period, as consecutive evaluations share
    all but one of their periods."""

    def __init__(self, statistic: str, slot: int) -> None:
        self._statistic = statistic
        self._slot = slot
        self._buckets: dict[int, list[float]] = {}
        self.slots: list[int] = []
        self._counts: list[int] = [0]
        self._sums: list[int] = [0]
        self._extremes: list[list[float]] = []
        self._cache: dict[tuple[int, int], float | None] = {}

    def add(self, index: int, value: float) -> None:
        self._buckets.setdefault(int(index), []).append(float(value))

    def freeze(self) -> None:
        self.slots = sorted(self._buckets)
        count = 0
        total = 0
        extremes: list[float] = []
        pick = min if self._statistic == "Minimum" else max
        for index in self.slots:
            values = self._buckets[index]
            count += len(values)
            self._counts.append(count)
            if self._statistic in ("Sum", "Average"):
                total += sum(_exact(v) for v in values)
                self._sums.append(total)
            elif self._statistic in ("Minimum", "Maximum"):
                extremes.append(pick(values))
        self._buckets.clear()
        if extremes:
            # Level h holds the extreme of 2**h consecutive slots from each position.
            self._extremes = [extremes]
            width = 1
            while 2 * width <= len(extremes):
                previous = self._extremes[-1]
                self._extremes.append(list(map(pick, previous, previous[width:])))
                width *= 2

    def statistic(self, first: int, stop: int) -> float | None:
        """The statistic over slots ``first <= slot < stop``; None when none holds data."""
        key = (first, stop)
        if key in self._cache:
            return self._cache[key]
        i = bisect_left(self.slots, first)
        j = bisect_left(self.slots, stop)
        result: float | None
        if i == j:
            result = None
        elif self._statistic == "SampleCount":
            result = float(self._counts[j] - self._counts[i])
        elif self._statistic in ("Minimum", "Maximum"):
            level = (j - i).bit_length() - 1
            table = self._extremes[level]
            pick = min if self._statistic == "Minimum" else max
            result = pick(table[i], table[j - (1 << level)])
        elif self._statistic == "Sum":
            result = (self._sums[j] - self._sums[i]) / _EXACT_UNIT
        else:
            result = (self._sums[j] - self._sums[i]) / (
                (self._counts[j] - self._counts[i]) * _EXACT_UNIT
            )
        self._cache[key] = result
        return result


def _exact(value: float) -> int:
    """``value`` as an exact integer count of 2**-1074."""
    numerator, denominator = float(value).as_integer_ratio()
    return numerator << (_EXACT_SHIFT - denominator.bit_length() + 1)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _integer(name: str, key: str, raw: object) -> int:
    """An integer property, which CloudFormation may pass as a string ("3600")."""
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    if isinstance(raw, str | float):
        try:
            number = float(raw)
        except ValueError:
            number = math.nan
        if math.isfinite(number) and number.is_integer():
            return int(number)
    raise ValueError(f"{name}: the property {key} must be an integer, got {raw!r}")


def _number(name: str, key: str, raw: object) -> float:
    """A numeric property, which CloudFormation may pass as a string ("0.5")."""
    if isinstance(raw, int | float | str) and not isinstance(raw, bool):
        try:
            number = float(raw)
        except ValueError:
            number = math.nan
        if math.isfinite(number):
            return number
    raise ValueError(f"{name}: the property {key} must be a finite number, got {raw!r}")
