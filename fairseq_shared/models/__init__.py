from fairseq_shared.models import shared_transformer  # noqa: F401  (registers the model)
from fairseq_shared.models import architectures  # noqa: F401  (then its architectures)
