"""Errors a user can hit. The CLI prints their message and exits with code 2."""


class ArenaError(Exception):
    """A problem with the user's input: the message says what, where and what to do."""


class ConfigError(ArenaError):
    """A run config that does not validate."""


class EngineError(ArenaError):
    """An engine that cannot be built or reached (missing model file, unknown engine)."""


class SpendLimitReached(ArenaError):
    """A run stopped before a model call would have taken its spend past ``spend_limit.usd``."""
