"""Test tiers: the markers that say what a test needs beyond a plain CPU machine, which of them a run
must not skip, and a per-tier count of what ran.

A pytest plugin (tests/conftest.py loads it). ``DCNCONVERT_REQUIRED_TIERS`` names the tiers that must
run (comma- or space-separated; ``.ci/run`` sets it). A test of a required tier that is skipped, by a
skip marker added at collection or by ``pytest.skip()`` in a fixture or the test itself, is reported
as failed with the tier and the skip's reason; a required tier of which no test ran fails the run.
Unset or empty, nothing is required and such tests skip with their reason.

A test that also carries the marker of a tier that is not required and may skip on a CPU machine
(``gpu``, ``tensorrt``) is not held to the others: a header test that needs a GPU may skip in CI.
Collection-time skips of a whole module (``pytest.skip(allow_module_level=True)``) produce no test
items and are caught only by the "no test ran" check.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

import pytest

ENV_VAR = "DCNCONVERT_REQUIRED_TIERS"

#: Every tier, by its marker (registered in pyproject.toml), in the order the summary lists them.
TIERS = ("trt_headers", "trt_lean", "wheel", "plugin_build", "trt_rtx", "gpu", "tensorrt")
#: Tiers that need hardware or software a CPU-only CI machine does not have; allowed to skip unless
#: required explicitly.
MACHINE_TIERS = ("gpu", "tensorrt")
#: What the summary calls the tests that carry no tier marker.
UNTIERED = "(no tier)"


def parse_required(value: str | None) -> tuple[str, ...]:
    """The tier names in ``value`` (comma- or whitespace-separated), in TIERS order; ValueError names
    an unknown one and the known ones."""
    names = [n for n in re.split(r"[\s,]+", value or "") if n]
    unknown = [n for n in names if n not in TIERS]
    if unknown:
        raise ValueError(f"{ENV_VAR}: unknown tier {', '.join(map(repr, unknown))}; "
                         f"the tiers are {', '.join(TIERS)}")
    return tuple(t for t in TIERS if t in names)


def item_tiers(item: pytest.Item) -> tuple[str, ...]:
    """The tiers whose marker ``item`` carries (its own, its class's or its module's)."""
    return tuple(t for t in TIERS if item.get_closest_marker(t) is not None)


def enforced_tiers(tiers: tuple[str, ...], required: tuple[str, ...]) -> tuple[str, ...]:
    """The required tiers among ``tiers``; none when the test also needs a machine tier that is not
    required (that tier decides whether it may skip)."""
    if any(t in MACHINE_TIERS and t not in required for t in tiers):
        return ()
    return tuple(t for t in tiers if t in required)


@dataclass
class Counts:
    passed: int = 0
    failed: int = 0
    skipped: int = 0

    @property
    def ran(self) -> int:
        return self.passed + self.failed


RANK = {"": 0, "passed": 1, "skipped": 2, "failed": 3}


@dataclass
class State:
    required: tuple[str, ...]
    #: nodeid -> (tiers, outcome so far: "passed", "failed" or "skipped")
    outcomes: dict[str, tuple[tuple[str, ...], str]] = field(default_factory=dict)

    def record(self, nodeid: str, tiers: tuple[str, ...], outcome: str, when: str) -> None:
        """Fold one phase's outcome into the test's: failed > skipped > passed (a passing setup or
        teardown says nothing)."""
        if outcome == "passed" and when != "call":
            return
        previous = self.outcomes.get(nodeid, (tiers, ""))[1]
        self.outcomes[nodeid] = (tiers, max(previous, outcome, key=RANK.__getitem__))

    def counts(self) -> dict[str, Counts]:
        table = {t: Counts() for t in (*TIERS, UNTIERED)}
        for tiers, outcome in self.outcomes.values():
            for tier in tiers or (UNTIERED,):
                setattr(table[tier], outcome, getattr(table[tier], outcome) + 1)
        return table

    def empty_required(self) -> list[str]:
        """The required tiers of which no test ran."""
        counts = self.counts()
        return [t for t in self.required if counts[t].ran == 0]


STATE = pytest.StashKey[State]()


def skip_reason(report: pytest.TestReport) -> str:
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


def pytest_configure(config: pytest.Config) -> None:
    try:
        required = parse_required(os.environ.get(ENV_VAR))
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    config.stash[STATE] = State(required)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    report = yield
    state = item.config.stash.get(STATE, None)
    if state is None:
        return report
    tiers = item_tiers(item)
    enforced = enforced_tiers(tiers, state.required)
    if enforced and report.skipped and not hasattr(report, "wasxfail"):
        reason = skip_reason(report)
        report.outcome = "failed"
        report.longrepr = (f"required tier {', '.join(enforced)} skipped "
                           f"({ENV_VAR}={' '.join(state.required)}): {reason}")
        state.record(item.nodeid, tiers, "skipped", report.when)
    elif report.skipped and hasattr(report, "wasxfail") and report.when == "call":
        state.record(item.nodeid, tiers, "passed", report.when)  # ran, and failed as expected
    else:
        state.record(item.nodeid, tiers, report.outcome, report.when)
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus) -> None:
    state = session.config.stash.get(STATE, None)
    if state is None or session.config.option.collectonly:
        return
    if state.empty_required() and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config: pytest.Config) -> None:
    state = config.stash.get(STATE, None)
    if state is None or config.option.collectonly:
        return
    counts = state.counts()
    rows = [t for t in (*TIERS, UNTIERED) if t in state.required or counts[t].ran or counts[t].skipped]
    if not state.required and rows in ([], [UNTIERED]):
        return  # nothing tiered here and nothing required: no table
    tr = terminalreporter
    tr.write_sep("=", "test tiers")
    tr.write_line(f"{'tier':<14}{'required':>9}{'ran':>7}{'passed':>8}{'failed':>8}{'skipped':>9}")
    for tier in rows:
        c = counts[tier]
        mark = "yes" if tier in state.required else ""
        bad = tier in state.required and (c.ran == 0 or c.failed)
        tr.write_line(f"{tier:<14}{mark:>9}{c.ran:>7}{c.passed:>8}{c.failed:>8}{c.skipped:>9}", red=bad)
    tr.write_line("(a test with several tier markers counts in each)")
    if state.required:
        tr.write_line("(the skips of a required tier's tests are counted as skipped and reported as failed)")
    else:
        tr.write_line(f"no tier is required ({ENV_VAR} unset): tests that cannot run here skip")
    for tier in state.empty_required():
        tr.write_line(f"FAILED: required tier {tier} ran no test ({ENV_VAR}={' '.join(state.required)})",
                      red=True, bold=True)
