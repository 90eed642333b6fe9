from tests.notifications.conftest import smtp  # noqa: F401  (the real SMTP server fixture)
