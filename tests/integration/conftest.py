"""Integration tests: the app in this process. Having a conftest here puts this folder on
``sys.path`` (pytest's prepend import mode), so every test folder below imports the
shared in-process broker as ``live_broker``."""
