"""One place for configuration: every knob the platform reads from its environment."""

from __future__ import annotations

from functools import lru_cache
from typing import Literal

from pydantic import AliasChoices, Field, SecretStr, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="OBERIK_", extra="ignore")

    # Where the platform runs: "aws" in a deployed stack, "local" under `oberik dev` and the tests.
    environment: Literal["aws", "local"] = "aws"
    table_name: str = "oberik"
    state_machine_arn: str = ""
    region: str = Field(
        default="us-east-1", validation_alias=AliasChoices("OBERIK_REGION", "AWS_REGION", "AWS_DEFAULT_REGION")
    )
    endpoint_url: str | None = Field(
        default=None, validation_alias=AliasChoices("OBERIK_ENDPOINT_URL", "AWS_ENDPOINT_URL")
    )

    # The deployment administrator's key: the only credential that may create projects. No default on AWS.
    admin_key: SecretStr | None = None

    # The model a project uses when it names none. "offline/..." is the built-in offline model.
    default_model: str = "offline/oberik-offline"
    openai_api_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("OBERIK_OPENAI_API_KEY", "OPENAI_API_KEY")
    )
    openai_base_url: str | None = Field(
        default=None, validation_alias=AliasChoices("OBERIK_OPENAI_BASE_URL", "OPENAI_BASE_URL")
    )
    openai_model: str = Field(
        default="gpt-4o-mini", validation_alias=AliasChoices("OBERIK_OPENAI_MODEL", "OPENAI_MODEL")
    )
    model_timeout_seconds: float = 120.0

    # Steps one Step Functions execution may take before the turn continues as a new execution,
    # keeping every execution far from the 25,000-event history limit.
    step_budget: int = 40
    # Steps one turn may take in all (model calls); past it the turn ends with `hit_tool_limit`.
    max_steps: int = 24
    # Longest the `wait` tool may pause a turn, in seconds.
    max_wait_seconds: int = 300

    # How long a blocking POST /chat waits for its turn to end, and how often it looks.
    blocking_timeout_seconds: float = 600.0
    poll_interval_seconds: float = 0.05

    # A streamed turn's first step runs in the process that took the request, while its execution starts
    # (engine.inline): the model hears the question sooner. Off: every step runs in the state machine.
    inline_first_step: bool = True
    # Streaming. Readers poll the frame log this often when no writer in their process wakes them first.
    stream_poll_seconds: float = 0.25
    # A `: keepalive` comment this often while nothing else is sent.
    keepalive_seconds: float = 15.0
    # A finished run's frames stay replayable this long.
    replay_window_seconds: float = 600.0
    # How often an idle reader checks that the run's execution is still alive (else: stream_lost).
    liveness_check_seconds: float = 5.0
    # 0: a stream stays open until the run ends. Above 0 (where responses are buffered, e.g. behind mangum),
    # the reader answers after this many seconds with `retry:` and the client reconnects with Last-Event-ID.
    sse_window_seconds: float = 0.0

    # End-user tokens: longest lifetime a project key may mint.
    max_token_ttl_seconds: int = 30 * 24 * 3600

    # UNSAFE outside tests and `oberik dev`: lets webhooks (and the web tools: web_search's provider, browse_url)
    # reach loopback and private addresses, i.e. this machine and its network. Cloud metadata addresses stay refused
    # even then. Never set it on a deployment.
    allow_private_webhooks: bool = False

    # Browser hand-offs: whether a hand-off may end itself once the page shows the person is finished (the
    # deployment's switch; a project can also turn it off), and the small vision model that judges that when the
    # page alone cannot ("provider/model"; unset: the project's handoff_check_model, else its default model).
    enable_handoff_autodetect: bool = True
    handoff_check_model: str | None = None

    # Web push (the playground's "notify me"): off unless both halves of a VAPID key pair are set, e.g. from
    # `npx web-push generate-vapid-keys` (URL-safe base64: the public key's 65-byte point, the private key's
    # 32 bytes). Keep the pair for good: browsers' subscriptions are bound to the public key.
    vapid_public_key: str | None = Field(
        default=None, validation_alias=AliasChoices("OBERIK_VAPID_PUBLIC_KEY", "VAPID_PUBLIC_KEY")
    )
    vapid_private_key: SecretStr | None = Field(
        default=None, validation_alias=AliasChoices("OBERIK_VAPID_PRIVATE_KEY", "VAPID_PRIVATE_KEY")
    )
    # Who push services may contact about this sender: a mailto: or https: URL (the JWT's `sub`).
    vapid_subject: str | None = Field(
        default=None, validation_alias=AliasChoices("OBERIK_VAPID_SUBJECT", "VAPID_SUBJECT")
    )

    # The browser tools. "local": Chromium in this process (oberik dev, tests); "lambda": the browser container
    # Lambda, one per conversation, driven through a mailbox in the table. Pages close when idle, when old and
    # when more than browser_max_pages are open; a held page on Lambda is billed for every second it is kept.
    browser_backend: Literal["local", "lambda"] = "local"
    browser_executable: str = "/usr/lib/chromium/chromium-headless-shell"
    browser_idle_seconds: float = 600.0
    browser_max_age_seconds: float = 3600.0
    browser_max_pages: int = 8
    browser_function_name: str = ""
    # A hand-off watched on the lambda backend: the host writes at most this many screencast frames a second into
    # the table (each frame is one write of its size, about 10-60 KB), keeping only the newest few.
    browser_handoff_fps: float = 6.0
    browser_handoff_frames_kept: int = 4

    @model_validator(mode="after")
    def _default_to_the_configured_provider(self) -> Settings:
        # With an OpenAI-compatible endpoint configured and no default named, use it rather than the offline model.
        if "default_model" not in self.model_fields_set and self.openai_api_key is not None:
            self.default_model = f"openai/{self.openai_model}"
        return self


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
