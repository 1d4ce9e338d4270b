"""The one ``Definitions`` of the machine, built from one ``Settings`` read here, once.

Importing this module writes nothing into ``os.environ``: Dagster resources read secrets through
``dg.EnvVar`` from the environment of the process that runs the op, and ``followup dev`` puts the
secrets read from ``.env`` or the secrets folder into the environment of the Dagster process it
starts (``settings.secret_environment``).
"""

from followup_pipeline.defs import build_definitions
from followup_pipeline.settings import load_settings

settings = load_settings()
defs = build_definitions(settings)
