"""Authentication and authorization, transport-neutral (issue #15).

- ``acl.py``: Kafka's ACL model and authorizer, pure logic (no I/O);
- ``store.py``: where ACL bindings live (a file in the data dir for one broker); in
  cluster mode ZooKeeper znodes as Kafka's (``app/core/replication/zk_acls.py``, beside
  the cluster's other znodes);
- ``users.py``: the users file of HTTP Basic (salted scrypt hashes only);
- ``authn.py``: authenticators that turn credentials into a Kafka principal (``User:alice``);
- ``audit.py``: the audit logger (Kafka's ``kafka.authorizer.logger``).

The HTTP and WebSocket adapter is ``app/api/security.py``.
"""
