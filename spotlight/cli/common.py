"""Flags that more than one ``spotlight`` subcommand takes."""

from __future__ import annotations

import argparse

from spotlight.scheduling.costs import PriceTable


def add_price_flags(parser: argparse.ArgumentParser) -> None:
    prices = PriceTable()
    parser.add_argument(
        "--on-demand-usd-per-gpu-h",
        type=float,
        default=prices.on_demand_usd_per_gpu_h,
        help="on-demand GPU price (default: AWS p5.48xlarge per GPU, %(default)s; see"
        " spotlight/scheduling/costs.py)",
    )
    parser.add_argument(
        "--spot-discount",
        type=float,
        default=prices.spot_discount,
        help="spot price = on-demand x (1 - discount) (default %(default)s)",
    )
