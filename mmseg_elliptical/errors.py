"""Every error class a user of the plugin can meet: the bottom floor. The
tools end with one line and status 2 on any of :data:`INPUT_ERRORS`."""


class ConfigError(ValueError):
    """A model or hook argument the plugin refuses."""


class InputError(ValueError):
    """An input the model refuses (channels, size, non-finite values)."""


class UnknownArgumentError(ConfigError, TypeError):
    """A keyword argument the class does not take (a ``TypeError``, as
    Python's own)."""


class ConversionError(TypeError):
    """A module has no elliptical version, or one that runs its settings."""


class AnalysisError(ValueError):
    """A question an analysis cannot answer for this model as asked: a part
    without transformer layers, a layer or head it does not have, a point
    outside the image."""


class GridError(ValueError):
    """A grid that cannot run as asked (names, settings, stored results)."""


class CheckpointError(ValueError):
    """A checkpoint that cannot serve: not a complete torch file, or one
    whose weights do not fit the config's model."""


class SourceError(ValueError):
    """A source checkpoint a converter cannot use (an unknown layout,
    pickled objects the weights-only loader refuses)."""


class ExportError(ValueError):
    """A segmentor that cannot be exported or run as asked, or an ONNX file
    that cannot serve (missing, not ONNX, its weights file apart)."""


class CompiledOpError(RuntimeError):
    """A compiled mmcv op reached in a venv set up with mmcv-lite, whose
    ``mmcv._ext`` is a stand-in (tools/misc/mmcv_ext_standin.py); the
    message names the op and how to install full mmcv."""


class GridInterrupted(KeyboardInterrupt):
    """Ctrl-C during a grid: its message says how many finished cells the
    store keeps (a tool ends on it with that one line, status 130)."""


#: What a user gave wrong (or a venv set up without what was asked): a tool
#: ends on these with one line, status 2.
INPUT_ERRORS = (ConfigError, InputError, ConversionError, AnalysisError,
                GridError, CheckpointError, SourceError, ExportError,
                CompiledOpError)
