"""The switch protocol on the systemd runtime: two real vLLM units inside a real systemd."""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from paroctl import net, state
from paroctl.client import Client
from paroctl.profile import profiles
from paroctl.records import BootRecord
from paroctl.switch import switch as switch_mod

if TYPE_CHECKING:
    from tests.systemd.conftest import ProfileDir, SystemdBox

pytestmark = pytest.mark.e2e


def _answering(port: int) -> list[str]:
    with Client(f"http://127.0.0.1:{port}", retries=0) as client:
        return client.models()


def test_switch_between_two_units_and_roll_back(
    sd_env: SystemdBox, sd_profiles: ProfileDir
) -> None:
    port = net.free_port()
    sd_profiles.write("sd-a", "smollm2-sd-a", port)
    sd_profiles.write("sd-b", "smollm2-sd-b", port)
    sd_profiles.write("sd-bad", "smollm2-sd-bad", port, "boot: {forbid: ['Starting to load']}\n")
    state.clear_live()
    deps = switch_mod.default_deps()

    def go(name: str) -> BootRecord:
        return switch_mod.switch(
            sd_profiles.load(name),
            deps,
            load_profile=profiles.load,
            timeout_s=sd_env.boot_timeout_s,
        )

    first = go("sd-a")
    assert first.serve.runtime == "systemd"
    assert _answering(port) == ["smollm2-sd-a"]
    assert sd_env.runtime.is_active("sd-a")
    go("sd-b")
    assert _answering(port) == ["smollm2-sd-b"]
    assert not sd_env.runtime.is_active("sd-a")
    # The rollback starts sd-b's unit again after the switch stopped it: the restart of a stopped
    # unit (a -> b -> a is the local runtime's test; one boot fewer here, CI time).
    with pytest.raises(switch_mod.SwitchFailed) as info:
        go("sd-bad")
    assert "forbidden boot line seen" in info.value.message
    assert "rolled back: sd-b is live again and verified" in info.value.message
    assert _answering(port) == ["smollm2-sd-b"]
    assert not sd_env.runtime.is_active("sd-bad") and not sd_env.runtime.is_active("sd-a")
    live = state.read_live()
    assert live is not None and live.serve.profile == "sd-b" and live.serve.runtime == "systemd"
    switch_mod.stop_live(live, deps)
    assert not net.port_open("127.0.0.1", port)
    assert not sd_env.runtime.is_active("sd-b")
