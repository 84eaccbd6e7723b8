# SPDX-License-Identifier: Apache-2.0
"""The soak's checks (soakcheck.py) on made-up traces: each failure the soak promises to catch
is caught, and kubelet's legitimate shapes (Died+Removed without Started, nothing at all for an
object no relist saw) pass."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import soakcheck  # noqa: E402
from soakcheck import Obj  # noqa: E402


def ev(cid, type_, pod="p1", **extra):
    return dict({"pod_uid": pod, "type": type_, "container_id": cid, "relist_source": "global"},
                **extra)


def container(cid="c1", pod="p1", life=(("created", 0), ("running", 1), ("exited", 2)),
              removed=3.0, code=7):
    o = Obj(id=cid, pod_uid=pod)
    for state, t in life:
        o.enter(state, t, t)
    if any(s == "exited" for s, _ in life):
        o.exit_code = code
    if removed is not None:
        o.remove(removed)
    return o


def relists_every(period, until, done_at=0.0):
    """Count samples for relists that end every @period: a scrape each 10th of a period."""
    samples = []
    t = 0.0
    while t < until:
        n = int((t - done_at) / period) if t >= done_at else 0
        samples.append((t, t + 0.001, n))
        t += period / 10
    return samples


FULL = [ev("c1", "ContainerStarted"), ev("c1", "ContainerDied", exit_code=7),
        ev("c1", "ContainerRemoved")]


class Sequences(unittest.TestCase):
    def check(self, events, obj=None):
        obj = obj or container()
        return soakcheck.check_sequences({obj.id: obj}, events)

    def test_full_life_passes(self):
        self.assertEqual(self.check(FULL), [])

    def test_died_removed_without_started_passes(self):
        self.assertEqual(self.check([ev("c1", "ContainerDied"), ev("c1", "ContainerRemoved")]),
                         [])

    def test_duplicate_died(self):
        f = self.check(FULL[:2] + [ev("c1", "ContainerDied", exit_code=7)] + FULL[2:])
        self.assertEqual(len(f), 1)
        self.assertIn("duplicate ContainerDied", f[0])

    def test_removed_without_died(self):
        f = self.check([ev("c1", "ContainerStarted"), ev("c1", "ContainerRemoved")])
        self.assertTrue(any("ContainerRemoved without ContainerDied" in x for x in f), f)

    def test_wrong_exit_code(self):
        f = self.check([ev("c1", "ContainerDied", exit_code=1)])
        self.assertTrue(any("exit code 1, it exited with 7" in x for x in f), f)

    def test_out_of_order(self):
        f = self.check([ev("c1", "ContainerDied", exit_code=7), ev("c1", "ContainerStarted")])
        self.assertTrue(any("out of order" in x for x in f), f)

    def test_wrong_pod(self):
        f = self.check([ev("c1", "ContainerStarted", pod="p2")])
        self.assertTrue(any("names pod 'p2'" in x for x in f), f)

    def test_unknown_object(self):
        f = self.check([ev("zz", "ContainerStarted")])
        self.assertTrue(any("never made" in x for x in f), f)

    def test_started_but_never_ran(self):
        o = container(life=(("created", 0), ("exited", 1)))
        f = self.check([ev("c1", "ContainerStarted")], o)
        self.assertTrue(any("never ran" in x for x in f), f)

    def test_removed_while_it_exists(self):
        o = container(removed=None)
        f = self.check(FULL, o)
        self.assertTrue(any("still exists" in x for x in f), f)

    def test_pod_sync_is_ignored(self):
        self.assertEqual(self.check([{"pod_uid": "p1", "type": "PodSync"}] + FULL), [])


class Seen(unittest.TestCase):
    # Relists end every 0.1 s; the container is created at 0, runs 1..2, is exited 2..3.
    def check(self, events, obj=None, outages=()):
        obj = obj or container()
        return soakcheck.check_seen({obj.id: obj}, events, relists_every(0.1, 5), list(outages),
                                    5.0)

    def test_reported_life_passes(self):
        self.assertEqual(self.check(FULL), [])

    def test_missing_died(self):
        f = self.check([ev("c1", "ContainerStarted"), ev("c1", "ContainerRemoved")])
        self.assertTrue(any("missing ContainerDied" in x for x in f), f)

    def test_died_without_exit_code_while_it_was_seen_exited(self):
        f = self.check([ev("c1", "ContainerStarted"), ev("c1", "ContainerDied"),
                        ev("c1", "ContainerRemoved")])
        self.assertTrue(any("without its exit code 7" in x for x in f), f)

    def test_missing_started(self):
        f = self.check(FULL[1:])
        self.assertTrue(any("missing ContainerStarted" in x for x in f), f)

    def test_never_reported(self):
        f = self.check([])
        self.assertTrue(any("never reported" in x for x in f), f)

    def test_too_short_for_a_relist_passes(self):
        o = container(life=(("created", 1.0), ("running", 1.01), ("exited", 1.05)),
                      removed=1.09)
        self.assertEqual(self.check([], o), [])

    def test_one_relist_in_between_is_not_enough(self):
        # 0.11 s holds the end of one relist but no whole one: the first may have begun before.
        o = container(life=(("created", 1.0), ("running", 1.02)), removed=1.13)
        o.exit_code = None
        self.assertEqual(self.check([], o), [])

    def test_outage_excuses(self):
        self.assertEqual(self.check([], outages=[(0.5, 4.0)]), [])

    def test_no_relists_no_claim(self):
        o = container()
        self.assertEqual(soakcheck.check_seen({o.id: o}, [], relists_every(0.1, 5, 10.0), [],
                                              5.0), [])


class Final(unittest.TestCase):
    def test_live_set(self):
        running = container("c1", life=(("created", 0), ("running", 1)), removed=None)
        exited = container("c2", removed=None)
        created = container("c3", life=(("created", 0),), removed=None)
        gone = container("c4")
        objs = {o.id: o for o in (running, exited, created, gone)}
        good = [ev("c1", "ContainerStarted"), ev("c2", "ContainerDied", exit_code=7)]
        self.assertEqual(soakcheck.check_final(objs, good), [])
        f = soakcheck.check_final(objs, good + [ev("c4", "ContainerStarted")])
        self.assertTrue(any("c4" in x and "removed in cri-sim" in x for x in f), f)
        f = soakcheck.check_final(objs, good[:1])
        self.assertTrue(any("c2" in x and "say nothing" in x for x in f), f)
        f = soakcheck.check_final(objs, [ev("c1", "ContainerStarted"), ev("c2", "ContainerDied")])
        self.assertTrue(any("its ContainerDied says no exit code" in x for x in f), f)
        f = soakcheck.check_final(objs, good + [ev("c1", "ContainerDied")])
        self.assertTrue(any("c1" in x and "plegd's events say exited" in x for x in f), f)


class Truth(unittest.TestCase):
    def test_listing(self):
        sb = Obj(id="sb-p1", pod_uid="p1", sandbox=True)
        sb.enter("running", 0, 0)
        c = container(removed=None)
        objs = {sb.id: sb, c.id: c}
        self.assertEqual(soakcheck.check_truth(objs, {"sb-p1": "READY", "c1": "EXITED"}), [])
        f = soakcheck.check_truth(objs, {"sb-p1": "NOTREADY", "c1": "EXITED", "x": "RUNNING"})
        self.assertEqual(len(f), 2, f)
        f = soakcheck.check_truth(objs, {"sb-p1": "READY"})
        self.assertTrue(any("does not list container c1" in x for x in f), f)


class Growth(unittest.TestCase):
    BOUNDS = {"rss": (8192, "KiB"), "fds": (8, "fds")}

    def samples(self, rss, fds=None):
        fds = fds or [10] * len(rss)
        return [{"rss": r, "fds": f} for r, f in zip(rss, fds)]

    def test_flat_passes(self):
        self.assertEqual(soakcheck.check_growth(self.samples([100, 9000, 200, 300, 8000, 9100]),
                                                self.BOUNDS), [])

    def test_growth_fails(self):
        f = soakcheck.check_growth(self.samples([100, 200, 4000, 6000, 8000, 9000]),
                                   self.BOUNDS)
        self.assertEqual(len(f), 1)
        self.assertIn("rss grew", f[0])
        f = soakcheck.check_growth(self.samples([1] * 6, [10, 10, 14, 15, 18, 19]), self.BOUNDS)
        self.assertEqual(len(f), 1)
        self.assertIn("fds grew", f[0])

    def test_too_few_samples(self):
        self.assertEqual(len(soakcheck.check_growth(self.samples([1, 2]), self.BOUNDS)), 1)


if __name__ == "__main__":
    unittest.main(verbosity=2)
