"""Ray's output goes to the run folder's ray.log; the terminal keeps the project's lines."""

from __future__ import annotations

import io
import logging

from spotlight.job.ray_logs import RayLogRoute, echo_worker_line, source_of


def test_the_project_s_lines_and_its_processes_errors_reach_the_terminal():
    assert echo_worker_line("ServeReplica:spotlight:Sampler", "WARNING x -- [spotlight] SP lost")
    assert echo_worker_line("RayTrainWorker", "Traceback (most recent call last):")
    assert echo_worker_line("RayTrainWorker", "RuntimeError: the update failed")
    assert echo_worker_line("ServeReplica:spotlight:Sampler", "ERROR 2026 replica -- boom")
    assert not echo_worker_line("RayTrainWorker", "Setting up process group for: env://")
    # Ray's own actors: never, even their errors (they go to ray.log)
    assert not echo_worker_line(
        "PlacementGroupCleaner", "Failed to query Ray Train Controller actor state."
    )
    assert not echo_worker_line("TrainController", "[2026 E 1 2] core_worker.cc:2465: ERROR")
    assert not echo_worker_line("ServeController", "WARNING Cannot deregister autoscaling state")
    assert source_of({"actor_name": "", "task_name": "", "pid": "raylet"}) == "raylet"


def test_worker_lines_all_go_to_the_file_and_only_the_project_s_to_the_terminal(tmp_path):
    term = io.StringIO()
    with RayLogRoute(tmp_path / "ray.log", term) as route:
        route.handle(
            {
                "actor_name": "PlacementGroupCleaner",
                "pid": 11,
                "ip": "10.0.0.1",
                "lines": ["Failed to query Ray Train Controller actor state."] * 3,
            }
        )
        route.handle(
            {
                "actor_name": "ServeReplica:spotlight:Sampler",
                "pid": 12,
                "ip": "10.0.0.1",
                "lines": ["\x1b[36mINFO access log\x1b[0m", "[spotlight] SP workers [3] lost"],
            }
        )
    log = (tmp_path / "ray.log").read_text().splitlines()
    assert len(log) == 5 and route.lines_routed == 5
    assert log[0] == (
        "(PlacementGroupCleaner pid=11, ip=10.0.0.1) "
        "Failed to query Ray Train Controller actor state."
    )
    assert "\x1b" not in "".join(log)  # colour codes stripped
    assert term.getvalue() == "[spotlight] SP workers [3] lost\n"
    assert route.lines_echoed == 1


def test_driver_loggers_go_to_the_file_and_keep_only_errors_on_the_terminal(tmp_path):
    import ray  # noqa: F401  # Ray's "ray" logger with its console handler

    console = io.StringIO()
    handler = logging.StreamHandler(console)
    ray_logger = logging.getLogger("ray")
    ray_logger.addHandler(handler)
    level_before = handler.level
    try:
        with RayLogRoute(tmp_path / "ray.log", io.StringIO()):
            logging.getLogger("ray.some_module").warning("Token authentication is enabled")
            logging.getLogger("ray.some_module").error("the GCS is gone")
            logging.getLogger("ray.some_module").info(
                "dashboard at \x1b[1mhttp://127.0.0.1\x1b[22m"
            )
        logging.getLogger("ray.some_module").warning("after the run")
    finally:
        ray_logger.removeHandler(handler)
    text = (tmp_path / "ray.log").read_text()
    assert "Token authentication is enabled" in text and "the GCS is gone" in text
    assert "after the run" not in text  # the route is gone with the run
    assert "dashboard at http://127.0.0.1" in text  # colour codes stripped
    assert "Token authentication" not in console.getvalue()
    assert "the GCS is gone" in console.getvalue() and "after the run" in console.getvalue()
    assert handler.level == level_before
