import os
import tempfile

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci", derandomize=True, max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow]
)
settings.register_profile("dev", max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("ci" if os.environ.get("CI") else "dev")

# Keep every test away from a developer's own imported offers (~/.config/ftsolve/offers.csv).
os.environ["FTSOLVE_HOME"] = tempfile.mkdtemp(prefix="ftsolve-test-home-")
