"""Deploying on a cluster: listeners honour bind_host, executors run the driver's pytimely."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from pytimely import spark as ps
from pytimely.spark import launcher


class Conf(dict):
    def get(self, key, default=None):
        return super().get(key, default)


def test_bind_host_covers_the_driver_listener_too():
    conf = Conf({"spark.driver.host": "driver.example"})
    # An explicit address is where every listener binds, the driver's control server included.
    assert launcher.listen_addresses("spark://m:7077", conf, "127.0.0.1") == (
        "127.0.0.1",
        "127.0.0.1",
        "127.0.0.1",
    )
    # Default on a cluster: every interface, the driver advertising spark.driver.host.
    assert launcher.listen_addresses("spark://m:7077", conf, None) == (
        "0.0.0.0",
        "0.0.0.0",
        "driver.example",
    )
    assert launcher.listen_addresses("local[4]", conf, None) == (
        "127.0.0.1",
        "127.0.0.1",
        "127.0.0.1",
    )


def test_shipped_zip_has_the_drivers_fingerprint(tmp_path):
    class FakeSpark:
        class sparkContext:
            @staticmethod
            def addPyFile(path):
                pass

    path = ps.ship_package(FakeSpark, str(tmp_path))
    # A fresh interpreter that can import pytimely only from the zip (as an executor would).
    code = (
        "import pytimely, pytimely.spark.session as s; "
        "print(pytimely.__file__); print(s.package_fingerprint())"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["PYTHONPATH"] = path
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        cwd=str(tmp_path),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout.split()
    assert out[0].startswith(path + os.sep)
    assert out[1] == ps.package_fingerprint()


@pytest.mark.spark
@pytest.mark.timeout(120)
def test_executors_with_other_pytimely_code_are_refused(spark, monkeypatch):
    monkeypatch.setattr(launcher, "package_fingerprint", lambda: "0" * 16)
    with pytest.raises(ps.SparkSetupError, match="whose code differs from the driver's") as info:
        ps.run(spark, lambda w: w.index, workers=2, attempts=3)
    assert "ship_package" in str(info.value)
