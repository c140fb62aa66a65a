from fairseq_shared.models import shared_transformer  # noqa: F401  (registers the model)
from fairseq_shared.models import architectures  # noqa: F401  (then its architectures)
from fairseq_shared.models import shared_lm  # noqa: F401  (the language model)
from fairseq_shared.models import lm_architectures  # noqa: F401  (then its architectures)
