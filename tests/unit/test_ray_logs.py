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
    # the autoscaler's infeasible requests reach the terminal; its other lines do not
    assert echo_worker_line(
        "autoscaler",
        "Error: No available node types can fulfill resource requests {'trainer_gpu': 1.0}*9.",
    )
    assert echo_worker_line(
        "autoscaler", "Warning: The following resource request cannot be scheduled right now"
    )
    assert not echo_worker_line("autoscaler", "Resized to 64 CPUs, 8 GPUs.")
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


def test_an_unschedulable_request_reaches_the_terminal_once_a_minute(tmp_path):
    """The autoscaler repeats it every second, its resources in any order."""
    term = io.StringIO()
    with RayLogRoute(tmp_path / "ray.log", term) as route:
        a = "No available node types can fulfill resource requests {'GPU': 1.0, 'CPU': 1.0}*1."
        b = "No available node types can fulfill resource requests {'CPU': 1.0, 'GPU': 1.0}*1."
        assert route._first_in_a_while(a, now=0.0)
        assert not route._first_in_a_while(b, now=1.0)  # the same request
        assert not route._first_in_a_while(a, now=59.0)
        assert route._first_in_a_while(b, now=61.0)  # a minute on: said again
        assert route._first_in_a_while(a.replace("GPU", "reward_gpu"), now=61.5)  # another one
        line = b.replace("1.0}", "2.0}")
        for _ in range(3):  # through the handler (Ray's own filter of the autoscaler's pid,
            # which needs a live Ray, left out)
            route.handle({"actor_name": "autoscaler", "pid": 7, "ip": "10.0.0.1", "lines": [line]})
    assert term.getvalue().count("No available node types") == 1


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
