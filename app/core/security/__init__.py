"""Authentication and authorization, transport-neutral (issue #15).

- ``acl.py``: Kafka's ACL model and authorizer, pure logic (no I/O);
- ``store.py``: where ACL bindings live (a file in the data dir for one broker);
  ``zk_store.py``: ZooKeeper znodes in cluster mode, as Kafka's;
- ``users.py``: the users file of HTTP Basic (salted scrypt hashes only);
- ``authn.py``: authenticators that turn credentials into a Kafka principal (``User:alice``);
- ``audit.py``: the audit logger (Kafka's ``kafka.authorizer.logger``).

The HTTP and WebSocket adapter is ``app/api/security.py``.
"""
