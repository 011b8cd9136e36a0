"""Replicas prove who they are: inter-broker credentials for a follower's fetches.

A fetch naming ``replica_id`` moves the leader's view of that follower, so its
ISR, high watermark and acks=all answers. It is accepted only with the
credential of the broker it names, in the ``Logbus-Replica-Auth`` header:
``HMAC-SHA256(secret, "replica:<broker id>")`` in hex. The secret is 32 random
bytes the first broker of the cluster creates in ZooKeeper
(``/cluster/inter_broker_secret``, see :mod:`.zk`); every broker reads it at start,
so only brokers of this cluster (and whoever can read its ZooKeeper, which the
cluster trusts anyway) can make one. Checked whether or not clients authenticate.

Stateless and thread-safe.
"""

from __future__ import annotations

import hashlib
import hmac

from app.common.errors import ClusterAuthorizationFailed

HEADER = "Logbus-Replica-Auth"
# Which broker a request comes from, for requests without ``replica_id`` (the leader-epoch
# lookup): with the credential, the HTTP door's authentication knows it is a broker.
ID_HEADER = "Logbus-Replica-Id"


class ReplicaAuth:
    def __init__(self, secret: bytes) -> None:
        assert len(secret) >= 16, "an inter-broker secret of at least 128 bits"
        self._secret = secret

    def token(self, broker_id: int) -> str:
        """The credential of ``broker_id``."""
        return hmac.new(self._secret, b"replica:%d" % broker_id, hashlib.sha256).hexdigest()

    def header(self, broker_id: int) -> bytes:
        """The request header lines (CRLF-terminated) a follower sends with its fetches."""
        return f"{HEADER}: {self.token(broker_id)}\r\n{ID_HEADER}: {broker_id}\r\n".encode("ascii")

    def verify(self, broker_id: int, presented: str | None) -> None:
        """ClusterAuthorizationFailed unless ``presented`` is ``broker_id``'s credential."""
        if presented is None or not hmac.compare_digest(
            presented.strip().encode("ascii", "replace"), self.token(broker_id).encode("ascii")
        ):
            raise ClusterAuthorizationFailed(
                f"a fetch claiming replica_id {broker_id} must carry broker {broker_id}'s "
                f"inter-broker credentials ({HEADER}); nothing changed"
            )
