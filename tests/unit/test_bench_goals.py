"""`scripts/bench/goals.py` reads issue 33's goals from `turn_overhead.py` results: each path's
turn p50 over the floor of the same run at concurrency 1, its share of the floor's turns/s at
32 concurrent, and whether each meets its goal."""

from __future__ import annotations

from typing import Any

from scripts.bench.goals import rows


def _path(turn_p50_ms: float, turns_per_second: float) -> dict[str, Any]:
    return {"turn": {"p50_ms": turn_p50_ms}, "turns_per_second": turns_per_second}


def _results(setup: str, levels: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {"figures": {"setup": f"stub; 1 uvicorn worker(s) on {setup}, memory on", **levels}}


def test_each_path_is_read_against_the_floor_of_its_own_run() -> None:
    results = _results(
        "postgresql",
        {
            "concurrency=1": {
                "floor": _path(3.0, 300.0),
                "backend": _path(6.9, 120.0),
                "io_floor": _path(5.0, 170.0),
                "baseline": _path(12.0, 70.0),
                "pgbouncer": _path(7.5, 100.0),
            },
            "concurrency=32": {
                "floor": _path(80.0, 200.0),
                "backend": _path(150.0, 150.0),
                "pgbouncer": _path(170.0, 130.0),
            },
        },
    )
    found = {row["row"]: row for row in rows(results)}
    direct = found["PostgreSQL, concurrency 1 (ms over the floor)"]
    assert (direct["now"], direct["io_floor"], direct["before"], direct["met"]) == (
        3.9,
        2.0,
        9.0,
        True,
    )
    pooled = found["PgBouncer, concurrency 1 (ms over the floor)"]
    assert (pooled["now"], pooled["io_floor"], pooled["before"], pooled["met"]) == (
        4.5,
        None,
        None,
        False,
    )
    shares = found["PostgreSQL, 32 concurrent (share of the floor's turns/s)"]
    assert (shares["floor"], shares["now"], shares["met"]) == (200.0, 0.75, True)
    assert found["PgBouncer, 32 concurrent (share of the floor's turns/s)"]["now"] == 0.65
    assert not found["PgBouncer, 32 concurrent (share of the floor's turns/s)"]["met"]


def test_a_run_without_its_floor_gives_no_row() -> None:
    results = _results("sqlite", {"concurrency=1": {"backend": _path(5.0, 200.0)}})
    assert rows(results) == []
    with_floor = _results(
        "sqlite", {"concurrency=1": {"backend": _path(5.0, 200.0), "floor": _path(3.0, 300.0)}}
    )
    assert [(row["row"], row["now"], row["met"]) for row in rows(with_floor)] == [
        ("SQLite, concurrency 1 (ms over the floor)", 2.0, True)
    ]
