"""Message types reserved for the gateway (kgw_*: the kernel side of checkpoints,
docs/checkpoints.md): a client that sends one over the kernel websocket is refused (close 1008)
and the kernel never sees it, even when its handlers are installed."""
import json

import pytest
import websockets.exceptions

import jclient as J
from jclient import run

pytestmark = pytest.mark.kgw_only


@pytest.mark.parametrize("msg_type", ["kgw_checkpoint_request", "kgw_rollback_request"])
def test_reserved_message_type_refused(gateway, kernel, msg_type):
    async def go():
        good = await J.connect(gateway, kernel["id"], "v1")
        r = await good.execute("import kgw_ckpt, os, json\nkgw_ckpt.install()\n"
                               "print(json.dumps(sorted(os.listdir(kgw_ckpt._rundir()))))")
        before = json.loads(r.stdout)
        bad = await J.connect(gateway, kernel["id"], "v1")
        with pytest.raises(websockets.exceptions.ConnectionClosed):
            await bad.send(bad.msg(msg_type, {"id": "evil", "files_dir": None}))
            await bad.recv(lambda m: False, timeout=10)
        assert bad.ws.close_code == 1008
        r = await good.execute("print(json.dumps(sorted(os.listdir(kgw_ckpt._rundir()))))")
        assert json.loads(r.stdout) == before  # no checkpoint socket: the kernel never saw it
        assert not [n for n in before if n.startswith(".ckpt-")]
        await good.close()
    run(go())
    assert gateway.alive()
