"""GPU-time accounting by pool and what it costs: the ledger every run keeps.

A *pool* is where a GPU comes from: ``spot`` (sampler replicas on spot nodes) or ``on_demand``
(the trainer, and sampler replicas on the on-demand fallback). The ledger counts, per pool,
*held* GPU-seconds (what the cloud bills: a GPU is held from when its replica or worker starts
until it stops, busy or idle) and *busy* GPU-seconds (time spent on work items or updates).
Cost is held time times the pool's price; utilization is busy over held.

Default prices (override with :class:`PriceTable` fields):

* On-demand: AWS EC2 ``p5.48xlarge`` (8x H100) in us-east-1 at $55.04/h, i.e. $6.88 per GPU-hour,
  the list price after AWS's June 2025 P5 price reduction (AWS EC2 On-Demand pricing page;
  check your region and date: GPU prices move).
* Spot: the on-demand price times ``1 - spot_discount``; the default discount 0.73 is the middle
  of the 69-77% range the source paper reports for spot GPUs.

Locally (no GPUs) each sampler replica and trainer worker counts as one virtual GPU of its pool,
so the figures show what the same schedule would cost on GPUs.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from spotlight.scheduling.work_queue import Pool

POOLS = tuple(Pool)


@dataclass(frozen=True)
class PriceTable:
    """Dollars per GPU-hour by pool."""

    on_demand_usd_per_gpu_h: float = 55.04 / 8
    """AWS p5.48xlarge on-demand, us-east-1, per GPU (see the module docstring)."""
    spot_discount: float = 0.73
    """Spot price = on-demand price x (1 - spot_discount)."""

    def __post_init__(self) -> None:
        if self.on_demand_usd_per_gpu_h < 0:
            raise ValueError(
                f"on_demand_usd_per_gpu_h must be >= 0, got {self.on_demand_usd_per_gpu_h}"
            )
        if not 0.0 <= self.spot_discount < 1.0:
            raise ValueError(f"spot_discount must be in [0, 1), got {self.spot_discount}")

    def usd_per_gpu_s(self, pool: str) -> float:
        _check_pool(pool)
        hourly = self.on_demand_usd_per_gpu_h
        if pool == Pool.SPOT:
            hourly *= 1.0 - self.spot_discount
        return hourly / 3600.0


@dataclass
class Ledger:
    """Held and busy GPU-seconds per pool, and their cost."""

    prices: PriceTable = field(default_factory=PriceTable)
    held_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(POOLS, 0.0))
    busy_s: dict[str, float] = field(default_factory=lambda: dict.fromkeys(POOLS, 0.0))

    def hold(self, pool: str, gpus: float, seconds: float) -> None:
        """``gpus`` GPUs of ``pool`` were held for ``seconds``."""
        _check_pool(pool)
        if gpus < 0 or seconds < 0:
            raise ValueError(f"hold({pool}, {gpus}, {seconds}): negative GPUs or seconds")
        self.held_s[pool] += gpus * seconds

    def busy(self, pool: str, gpu_seconds: float) -> None:
        """``gpu_seconds`` of work ran on ``pool``."""
        _check_pool(pool)
        if gpu_seconds < 0:
            raise ValueError(f"busy({pool}, {gpu_seconds}): negative GPU-seconds")
        self.busy_s[pool] += gpu_seconds

    def cost_usd(self) -> float:
        return sum(self.held_s[p] * self.prices.usd_per_gpu_s(p) for p in POOLS)

    def utilization(self, pool: str) -> float:
        """Busy over held for ``pool`` (0 when nothing was held)."""
        held = self.held_s[pool]
        return min(1.0, self.busy_s[pool] / held) if held > 0 else 0.0

    def snapshot(self) -> dict[str, float]:
        """The figures a metrics row carries."""
        return {
            "gpu_s_spot": self.held_s[Pool.SPOT],
            "gpu_s_on_demand": self.held_s[Pool.ON_DEMAND],
            "busy_gpu_s_spot": self.busy_s[Pool.SPOT],
            "busy_gpu_s_on_demand": self.busy_s[Pool.ON_DEMAND],
            "util_spot": self.utilization(Pool.SPOT),
            "util_on_demand": self.utilization(Pool.ON_DEMAND),
            "cost_usd": self.cost_usd(),
        }

    def to_dict(self) -> dict:
        return {"held_s": dict(self.held_s), "busy_s": dict(self.busy_s)}

    def load(self, d: dict) -> None:
        """Continue from a saved :meth:`to_dict` (a resumed run keeps its totals)."""
        self.held_s = {p: float(d["held_s"].get(p, 0.0)) for p in POOLS}
        self.busy_s = {p: float(d["busy_s"].get(p, 0.0)) for p in POOLS}


def ledger_pool(pool: str) -> str:
    """The ledger's pool of a work item done on ``pool``: the trainer's GPUs (pool
    ``trainer``, sampling while they wait for the rollout) are on-demand GPUs."""
    return Pool.ON_DEMAND if pool == Pool.TRAINER else pool


def held_gpus(workers_by_pool: dict[str, int], trainer_gpus: int) -> list[tuple[str, int]]:
    """The GPUs held now, as (ledger pool, GPUs): the sampler replicas of each pool, then the
    trainer's ``trainer_gpus`` (0 when it is not running) as on-demand. The trainer's workers
    that pull items (pool ``trainer``) are those same GPUs: not counted twice."""
    held = [(pool, n) for pool, n in workers_by_pool.items() if pool != Pool.TRAINER]
    if trainer_gpus:
        held.append((Pool.ON_DEMAND, trainer_gpus))
    return held


def _check_pool(pool: str) -> None:
    if pool not in POOLS:
        raise ValueError(f"unknown pool {pool!r}; known: {', '.join(POOLS)}")
