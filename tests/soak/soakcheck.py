# SPDX-License-Identifier: Apache-2.0
"""The soak's checks (scripts/soak.sh), pure functions over what the driver recorded.

Every check takes plain data and returns a list of failure messages (empty: passed), so the
checks are tested alone on made-up traces (test-soakcheck.py) and the driver only collects.

What the driver records
-----------------------
objects: {id: Obj}, one per container and per pod sandbox the driver made.  Obj.intervals is
    the object's life as a list of (state, begin, end): state "created", "running" or "exited"
    (a READY sandbox is "running", a NOTREADY one "exited", as kubelet's PLEG maps them); begin
    is when cri-sim acknowledged the command that entered the state (so the state held from
    then on), end when the command that left it was sent (so it still held until then), None
    while it lasts.  Obj.removed is the time the removing command was sent, or None.
    Obj.exit_code is the code it exited with (137 when its pod was stopped under it).
events: plegd's JSON event lines, in the order plegd wrote them.
relists: (scrape_begin, scrape_end, n) samples of kubelet_pleg_relist_duration_seconds_count,
    the number of global relists plegd has finished (failed ones included).
outages: (begin, end) spans in which plegd's relists may fail: from just before the runtime
    was taken away until plegd said "relist succeeded after N failed relists" (or a little after
    the runtime came back when it never failed).
Times are the driver's time.monotonic() seconds.

What is required (kubelet's Generic PLEG as doc/design.md gives it)
-------------------------------------------------------------------
PLEG compares what one successful relist saw with the last one it published: running ->
ContainerStarted, exited -> ContainerDied (with the exit code ContainerStatus gave), gone ->
ContainerRemoved, preceded by ContainerDied unless it was already seen exited; created maps to
unknown and gives nothing visible.  So, per object:
  1. Its events are, in order, a subsequence of ContainerStarted, ContainerDied,
     ContainerRemoved, each at most once (a second one is a duplicate), ContainerRemoved only
     after ContainerDied, each for the object's own pod.  ContainerStarted only if it ran,
     ContainerRemoved only if it was removed; ContainerDied only if it exited or was removed
     (a container removed before it was seen exited gets Died then Removed).  A ContainerDied
     with an exit code has the code the object exited with.
  2. Seen in a state => reported: if one whole global relist (started after the state began and
     finished before it ended) ran while the object was in a state, outside every outage, PLEG
     must have seen it there: running -> a ContainerStarted; exited -> a ContainerDied with its
     exit code (ContainerStatus then still found it exited); created -> some event later (any
     next state gives one).  An object whose every state was too short to be seen
     (created and removed between two relists) may have no event at all: kubelet's semantics.
  3. At the end, after plegd relisted past the last change, the live set from plegd's events
     (last event ContainerStarted -> running, ContainerDied -> exited) equals cri-sim's
     (RUNNING / READY -> running, EXITED / NOTREADY -> exited; CREATED -> nothing reported);
     every removed object that was reported ends with ContainerRemoved.
  4. cri-sim's own listing at the end (over CRI) agrees with what the driver did.
  5. Growth: over the samples of plegd's RSS, fd and thread counts taken after warm-up, the
     last third's maximum exceeds the first third's maximum by at most the stated bound.
"""

import bisect
from dataclasses import dataclass, field
from typing import Optional

STARTED = "ContainerStarted"
DIED = "ContainerDied"
REMOVED = "ContainerRemoved"
POD_SYNC = "PodSync"
ORDER = (STARTED, DIED, REMOVED)


@dataclass
class Obj:
    id: str
    pod_uid: str
    sandbox: bool = False
    intervals: list = field(default_factory=list)  # [state, begin, end|None]
    removed: Optional[float] = None
    exit_code: Optional[int] = None

    @property
    def state(self):
        """The current state, or None once removed."""
        if self.removed is not None or not self.intervals:
            return None
        return self.intervals[-1][0]

    def enter(self, state, t_ack, t_sent):
        """The object enters @state: the command was sent at @t_sent, acknowledged at @t_ack."""
        if self.intervals and self.intervals[-1][2] is None:
            self.intervals[-1][2] = t_sent
        self.intervals.append([state, t_ack, None])

    def remove(self, t_sent):
        if self.intervals and self.intervals[-1][2] is None:
            self.intervals[-1][2] = t_sent
        self.removed = t_sent

    def ever(self, state):
        return any(s == state for s, _, _ in self.intervals)


def describe(obj):
    kind = "sandbox" if obj.sandbox else "container"
    return f"{kind} {obj.id} of pod {obj.pod_uid}"


def events_by_id(events):
    """{id: [event, ...]} in stream order, PodSync left out."""
    out = {}
    for e in events:
        if e.get("type") == POD_SYNC:
            continue
        out.setdefault(e.get("container_id"), []).append(e)
    return out


def view(evs):
    """What plegd's events say about one object: None (nothing), running, exited or removed."""
    if not evs:
        return None
    return {STARTED: "running", DIED: "exited", REMOVED: "removed"}.get(evs[-1]["type"], "?")


def short(e):
    code = f" exit_code={e['exit_code']}" if "exit_code" in e else ""
    return f"{e.get('type')}({e.get('relist_source')}{code})"


def history(obj, evs):
    states = ", ".join(f"{s}@{b:.3f}" for s, b, _ in obj.intervals)
    gone = f", removed@{obj.removed:.3f}" if obj.removed is not None else ""
    got = " ".join(short(e) for e in evs) or "no events"
    return f"[life: {states}{gone}; plegd: {got}]"


# ---- 1. event sequences ----

def check_sequences(objects, events):
    failures = []
    for cid, evs in events_by_id(events).items():
        obj = objects.get(cid)
        if obj is None:
            failures.append(f"event for an object the soak never made: {short(evs[0])} "
                            f"container_id={cid!r} pod_uid={evs[0].get('pod_uid')!r}")
            continue
        last = -1
        seen = set()
        for e in evs:
            t = e.get("type")
            if e.get("pod_uid") != obj.pod_uid:
                failures.append(f"{describe(obj)}: {t} names pod {e.get('pod_uid')!r} "
                                f"{history(obj, evs)}")
            if t not in ORDER:
                failures.append(f"{describe(obj)}: unexpected event type {t!r} "
                                f"{history(obj, evs)}")
                continue
            if t in seen:
                failures.append(f"{describe(obj)}: duplicate {t} {history(obj, evs)}")
            elif ORDER.index(t) < last:
                failures.append(f"{describe(obj)}: {t} out of order {history(obj, evs)}")
            seen.add(t)
            last = max(last, ORDER.index(t))
            if t == STARTED and not obj.ever("running"):
                failures.append(f"{describe(obj)}: ContainerStarted but it never ran "
                                f"{history(obj, evs)}")
            if t == REMOVED:
                if obj.removed is None:
                    failures.append(f"{describe(obj)}: ContainerRemoved but it still exists "
                                    f"{history(obj, evs)}")
                if DIED not in seen:
                    failures.append(f"{describe(obj)}: ContainerRemoved without ContainerDied "
                                    f"{history(obj, evs)}")
            if t == DIED:
                if not obj.ever("exited") and obj.removed is None:
                    failures.append(f"{describe(obj)}: ContainerDied but it neither exited nor "
                                    f"was removed {history(obj, evs)}")
                if "exit_code" in e and e["exit_code"] != obj.exit_code:
                    failures.append(f"{describe(obj)}: ContainerDied with exit code "
                                    f"{e['exit_code']}, it exited with {obj.exit_code} "
                                    f"{history(obj, evs)}")
    return failures


# ---- 2. every state that a whole relist saw is reported ----

class Relists:
    """Which global relists certainly ran inside a span of time, from count samples."""

    def __init__(self, samples):
        self.samples = sorted(samples)
        self.begins = [s[0] for s in self.samples]
        by_end = sorted(self.samples, key=lambda s: s[1])
        self.ends = [s[1] for s in by_end]
        self.end_counts = [s[2] for s in by_end]

    def inside(self, begin, end):
        """(first, last) relist numbers that started after @begin and finished before @end, or
        None.  The count c1 read by a scrape begun after @begin means relist c1 + 1 had not
        finished by then, so relist c1 + 2, which starts only after c1 + 1 ends, started after
        @begin; the count c2 read by a scrape finished before @end means relist c2 had ended."""
        i = bisect.bisect_left(self.begins, begin)
        if i == len(self.begins):
            return None
        c1 = self.samples[i][2]
        j = bisect.bisect_right(self.ends, end) - 1
        if j < 0:
            return None
        c2 = self.end_counts[j]
        return (c1 + 2, c2) if c2 >= c1 + 2 else None


def overlaps(begin, end, outages):
    return any(b < end and begin < e for b, e in outages)


def check_seen(objects, events, relists, outages, t_end):
    """Rule 2.  @t_end closes the states that still last."""
    failures = []
    evs_by_id = events_by_id(events)
    counter = Relists(relists)
    for obj in objects.values():
        evs = evs_by_id.get(obj.id, [])
        types = [e["type"] for e in evs]
        for state, begin, end in obj.intervals:
            end = t_end if end is None else end
            if overlaps(begin, end, outages):
                continue
            whole = counter.inside(begin, end)
            if not whole:
                continue
            span = f"relists {whole[0]}..{whole[1]} ran while it was {state}"
            if state == "running" and STARTED not in types:
                failures.append(f"{describe(obj)}: missing ContainerStarted: {span} "
                                f"{history(obj, evs)}")
            elif state == "exited":
                died = [e for e in evs if e["type"] == DIED]
                if not died:
                    failures.append(f"{describe(obj)}: missing ContainerDied: {span} "
                                    f"{history(obj, evs)}")
                elif not obj.sandbox and "exit_code" not in died[0]:
                    failures.append(f"{describe(obj)}: ContainerDied without its exit code "
                                    f"{obj.exit_code}: {span} {history(obj, evs)}")
            elif state == "created" and not evs and (obj.removed is not None or
                                                      obj.state != "created"):
                failures.append(f"{describe(obj)}: never reported: {span} and it changed "
                                f"since {history(obj, evs)}")
    return failures


# ---- 3. the final live set ----

def expected_view(obj):
    return {"running": "running", "exited": "exited", "created": None}.get(obj.state)


def live_set_diff(objects, events):
    """Rule 3 as a list of mismatches (the driver also polls it to know when plegd caught up)."""
    diff = []
    evs_by_id = events_by_id(events)
    for obj in objects.values():
        evs = evs_by_id.get(obj.id, [])
        got = view(evs)
        if obj.removed is None:
            want = expected_view(obj)
            if got != want:
                diff.append(f"{describe(obj)}: cri-sim has it {obj.state}, plegd's events say "
                            f"{got or 'nothing'} {history(obj, evs)}")
        elif got not in (None, "removed"):
            diff.append(f"{describe(obj)}: removed in cri-sim, plegd's events say {got} "
                        f"{history(obj, evs)}")
    return diff


def check_final(objects, events):
    failures = live_set_diff(objects, events)
    evs_by_id = events_by_id(events)
    for obj in objects.values():
        if obj.sandbox or obj.removed is not None or obj.state != "exited":
            continue
        died = [e for e in evs_by_id.get(obj.id, []) if e["type"] == DIED]
        if len(died) == 1 and died[0].get("exit_code") != obj.exit_code:
            failures.append(f"{describe(obj)}: exited with {obj.exit_code}, its ContainerDied "
                            f"says {died[0].get('exit_code', 'no exit code')}")
    return failures


# ---- 4. cri-sim's listing against the driver's model ----

CRI_STATES = {"RUNNING": "running", "EXITED": "exited", "CREATED": "created",
              "READY": "running", "NOTREADY": "exited"}


def check_truth(objects, listing):
    """@listing: {id: CRI state name} of every container and sandbox cri-sim lists."""
    failures = []
    for obj in objects.values():
        have = listing.get(obj.id)
        if obj.removed is not None:
            if have is not None:
                failures.append(f"cri-sim still lists {describe(obj)} ({have}), the soak "
                                f"removed it")
        elif have is None:
            failures.append(f"cri-sim does not list {describe(obj)}, the soak left it "
                            f"{obj.state}")
        elif CRI_STATES.get(have) != obj.state:
            failures.append(f"cri-sim lists {describe(obj)} as {have}, the soak left it "
                            f"{obj.state}")
    for oid, have in listing.items():
        if oid not in objects:
            failures.append(f"cri-sim lists {oid} ({have}), which the soak never made")
    return failures


# ---- 5. growth ----

def check_growth(samples, bounds):
    """@samples: [{name: value, ...}, ...] in time order; @bounds: {name: (limit, unit)}.
    Fails when max(last third) - max(first third) > limit."""
    failures = []
    n = len(samples)
    if n < 6:
        return [f"only {n} resource samples, need 6 or more to compare thirds"]
    third = n // 3
    for name, (limit, unit) in bounds.items():
        first = max(s[name] for s in samples[:third])
        last = max(s[name] for s in samples[n - third:])
        if last - first > limit:
            failures.append(f"{name} grew: max {last} {unit} in the last third of the samples "
                            f"against {first} {unit} in the first (bound +{limit} {unit})")
    return failures


def growth_summary(samples, bounds):
    n = len(samples)
    third = max(n // 3, 1)
    parts = []
    for name, (limit, unit) in bounds.items():
        if not samples:
            break
        first = max(s[name] for s in samples[:third])
        last = max(s[name] for s in samples[n - third:])
        parts.append(f"{name} {first} -> {last} {unit} (bound +{limit})")
    return ", ".join(parts)
