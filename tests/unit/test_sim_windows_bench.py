"""benchmarks/sim_windows.py keeps each run's report.md without links to plots it does not keep."""

import runpy
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sim_windows.py"


def test_the_kept_report_drops_only_its_image_lines():
    without_images = runpy.run_path(str(SCRIPT))["without_images"]
    report = (
        "# paper-512\n"
        "| system | h |\n| --- | --- |\n| spotlight | 5.2 |\n"
        "\n"
        "![reward](reward_vs_time.png) ![cost](cost_vs_time.png)\n"
        "  ![utilization](utilization.png)\n"
        "See [the trace](../traces.md) and `![not an image line]`.\n"
    )
    kept = without_images(report)
    assert "png" not in kept
    assert kept == (
        "# paper-512\n"
        "| system | h |\n| --- | --- |\n| spotlight | 5.2 |\n"
        "\n"
        "See [the trace](../traces.md) and `![not an image line]`.\n"
    )
