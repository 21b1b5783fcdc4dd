"""Cloud Functions entry points. Cloud Functions imports main.py from the root of the uploaded source, so
terraform/functions.tf puts this file there as main.py; the functions themselves live in functions/main.py,
whose __all__ names them (and must equal the keys of local.functions in terraform/locals.tf: tests/terraform).
"""

from functions.main import *  # noqa: F403
from functions.main import __all__  # noqa: F401
