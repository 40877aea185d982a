"""A relaid-out constant (a tied table's lm_head layout) is built on a worker thread while the
ops before its first reader run (sim/relayouts.py): its reader waits for it, its failure is
raised at that reader, and the bytes are those the eager build gives."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest
import torch

from spyrec.errors import SimulatorFault
from spyrec.sim import relayouts as relayouts_module
from spyrec.sim.relayouts import Relayouts
from tests.differential.harness import run_and_compare
from tests.passes.test_constant_layouts import VOCAB, TiedLM


@pytest.fixture
def worker_thread(monkeypatch):
    """The threaded path, whatever SPYREC_SIM_THREADS the suite runs with (at 1 a layout is
    built at once, on the calling thread: `test_one_thread_lays_out_at_once`)."""
    monkeypatch.setattr(relayouts_module.threads, "count", lambda: 2)


def test_a_reader_waits_for_its_layout_and_others_do_not(worker_thread):
    started, release = threading.Event(), threading.Event()
    done = []

    def lay_out():
        started.set()
        release.wait(60)        # only a wait that should not happen takes that long
        done.append("head")

    pending = Relayouts({"head": lay_out})
    assert started.wait(60) and pending
    pending.ready(["x", "embed"])   # not a reader of it: no wait (waiting would see "head")
    assert done == []
    threading.Timer(0.2, release.set).start()
    pending.ready(["x", "head"])
    assert done == ["head"] and not pending
    pending.finish()


def test_a_failed_layout_is_raised_at_its_reader(worker_thread):
    def lay_out():
        raise SimulatorFault("tensor 'head': broken")

    pending = Relayouts({"head": lay_out})
    with pytest.raises(SimulatorFault, match="'head': broken"):
        pending.ready(["head"])
    pending.close()


def test_one_thread_lays_out_at_once(monkeypatch):
    monkeypatch.setattr(relayouts_module.threads, "count", lambda: 1)
    done = []
    pending = Relayouts({"head": lambda: done.append(threading.current_thread())})
    assert done == [threading.current_thread()] and not pending


def test_a_slow_layout_is_waited_for_by_the_lm_head(tmp_path, monkeypatch):
    """The tied table's second layout takes 0.3 s more to build than the run takes to reach
    the lm_head: the logits still equal eager's. (Whether the lm_head does wait depends on
    the machine's speed; the result may not, so only the result is asserted.)"""
    from spyrec.sim import weights

    slow, built = weights.relaid_out, []

    def slowly(*args, **kwargs):
        time.sleep(0.3)
        built.append(1)
        return slow(*args, **kwargs)

    monkeypatch.setattr(weights, "relaid_out", slowly)
    ids = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(1))
    run_and_compare(tmp_path, TiedLM(torch.float32), (ids,))
    assert len(built) == 1          # the slow layout is the one the run used
