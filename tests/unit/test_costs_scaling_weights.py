"""Cost ledger (hand-computed), the queue-depth scaling rule, checksummed weights."""

import math

import pytest
import torch

from spotlight.flow.weights import (
    WeightsCorrupted,
    WeightsHeader,
    checksum,
    pack_state,
    unpack_state,
)
from spotlight.scheduling.costs import Ledger, PriceTable
from spotlight.scheduling.scaling import desired_replicas


def test_ledger_costs_held_time_by_pool():
    prices = PriceTable(on_demand_usd_per_gpu_h=3.6, spot_discount=0.75)
    ledger = Ledger(prices)
    ledger.hold("spot", gpus=4, seconds=1800)  # 2 GPU-hours at 0.9 $/h
    ledger.hold("on_demand", gpus=1, seconds=3600)  # 1 GPU-hour at 3.6 $/h
    ledger.busy("spot", 3600)
    assert ledger.cost_usd() == pytest.approx(2 * 0.9 + 3.6)
    assert ledger.utilization("spot") == pytest.approx(0.5)
    assert ledger.utilization("on_demand") == 0.0
    snap = ledger.snapshot()
    assert snap["gpu_s_spot"] == 7200 and snap["gpu_s_on_demand"] == 3600
    again = Ledger(prices)
    again.load(ledger.to_dict())
    assert again.snapshot() == snap


def test_default_prices_are_the_cited_ones():
    p = PriceTable()
    assert p.on_demand_usd_per_gpu_h == pytest.approx(55.04 / 8)
    assert p.usd_per_gpu_s("spot") == pytest.approx(55.04 / 8 * 0.27 / 3600)


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: PriceTable(spot_discount=1.0), "spot_discount"),
        (lambda: PriceTable(on_demand_usd_per_gpu_h=-1), "on_demand"),
        (lambda: Ledger().hold("gpu", 1, 1), "unknown pool"),
        (lambda: Ledger().hold("spot", -1, 1), "negative"),
        (lambda: Ledger().busy("spot", -1), "negative"),
    ],
)
def test_ledger_refuses_bad_input(call, match):
    with pytest.raises(ValueError, match=match):
        call()


@pytest.mark.parametrize(
    "pending, leased, current, want",
    [
        (8, 0, 1, 4),  # 8 items, 2 per replica
        (9, 2, 1, 6),
        (100, 0, 2, 8),  # capped at max
        (1, 0, 5, 5),  # little work left: never stop a replica that may hold it
        (0, 0, 3, 1),  # no work at all: down to min (Serve's downscale delay applies)
        (float("nan"), 0, 3, 3),  # no metrics yet
    ],
)
def test_desired_replicas(pending, leased, current, want):
    assert desired_replicas(pending, leased, current, 1, 8) == want


def test_desired_replicas_bounds():
    assert desired_replicas(0, 0, 0, 2, 8) == 2
    with pytest.raises(ValueError, match="bounds"):
        desired_replicas(1, 0, 1, 3, 2)
    assert not math.isnan(desired_replicas(float("nan"), 1, 1, 1, 1))


def test_weights_roundtrip_and_corruption_is_caught():
    state = {"a": torch.arange(6.0).view(2, 3), "b": torch.ones(4)}
    data = pack_state(state, {"format": "x"})
    header = WeightsHeader(3, checksum(data), len(data), iteration=2)
    back = unpack_state(data, header)
    assert all(torch.equal(back[k], state[k]) for k in state)
    flipped = bytearray(data)
    flipped[-1] ^= 1
    with pytest.raises(WeightsCorrupted, match="sha256"):
        unpack_state(bytes(flipped), header)
    with pytest.raises(WeightsCorrupted, match="partial"):
        unpack_state(data[:-10], header)
