from ._tubelet import (EDECODE as EDECODE, EFORMAT as EFORMAT, EINVAL as EINVAL,
                       ENOENT as ENOENT, ERANGE as ERANGE, Error as Error,
                       InvalidError as InvalidError, Loader as Loader,
                       NotFoundError as NotFoundError, PoolBuffer as PoolBuffer,
                       RangeError as RangeError,
                       VideoReader as VideoReader, prep as prep,
                       probe as probe, synth as synth)

__version__: str

import os
from typing import Any, Dict, Union

def checkpoint_settings(path: Union[str, "os.PathLike[str]"]) -> Dict[str, Any]: ...
