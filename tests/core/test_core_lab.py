"""The lab apart from the product: its shared statistics (``embodied.apps.lab.stats``) and the
one PPO settings dataclass every PPO user embeds (``controllers.rl.PPOSettings``)."""

from __future__ import annotations

import dataclasses

import pytest

from controllers.rl.configuration_rl import PPOSettings, merge_ppo_layers
from controllers.rl.training_rl import CONTROLLER_PPO, RLTrainSettings
from embodied.apps.cli._config_options import field_docs
from embodied.apps.lab import stats
from embodied.apps.lab.judge_rl import BUDGETS as JUDGE_BUDGETS
from embodied.apps.lab.judge_rl import JUDGE_RL_PPO, JudgeRLConfig
from embodied.apps.lab.reppo import REPPO_PPO, RePPOExperimentConfig
from embodied.apps.lab.shield import SHIELD_PPO, ShieldExperimentConfig
from embodied.errors import ConfigError

PPO_FIELDS = (
    "n_steps",
    "batch_size",
    "n_epochs",
    "learning_rate",
    "gamma",
    "gae_lambda",
    "clip_range",
    "ent_coef",
)


def test_rate_and_mean_std_cells() -> None:
    r = stats.rate(3, 10)
    assert (r["count"], r["n"], r["rate"]) == (3, 10, 0.3)
    assert stats.format_rate(r) == "3/10 = 0.300 [0.108, 0.603]"
    assert stats.rate(0, 0)["rate"] == 0.0
    assert stats.mean_std([1.0, None, 3.0]) == {"mean": 2.0, "std": pytest.approx(2**0.5)}
    assert stats.mean_std([None]) == {"mean": None, "std": None}
    assert stats.mean_std([5]) == {"mean": 5.0, "std": 0.0}
    assert stats.format_pm({"mean": 1.25, "std": 0.5}) == "1.25 ± 0.50"
    assert stats.format_pm({"mean": 1.25, "std": 0.5}, 0) == "1 ± 0"
    assert stats.format_pm({"mean": None, "std": None}) == "-"
    assert stats.mean_or_none([]) is None and stats.mean_or_none([1, 2]) == 1.5


def test_markdown_table() -> None:
    assert stats.markdown_table(["a", "b"], [["1", "2"], ["3", "4"]]) == [
        "| a | b |",
        "|---|---|",
        "| 1 | 2 |",
        "| 3 | 4 |",
    ]


def test_ppo_settings_are_stable_baselines3_defaults_and_declared_once() -> None:
    import inspect

    from stable_baselines3 import PPO

    sb3 = inspect.signature(PPO.__init__).parameters
    assert {f.name: f.default for f in dataclasses.fields(PPOSettings)} == {
        name: sb3[name].default for name in PPO_FIELDS
    }
    assert set(field_docs(PPOSettings)) == set(PPO_FIELDS)
    assert PPOSettings().sb3_kwargs() == {name: sb3[name].default for name in PPO_FIELDS}
    # every user embeds it, with its own defaults
    for config, default in (
        (RLTrainSettings, CONTROLLER_PPO),
        (JudgeRLConfig, JUDGE_RL_PPO),
        (ShieldExperimentConfig, SHIELD_PPO),
        (RePPOExperimentConfig, REPPO_PPO),
    ):
        fields = {f.name: f for f in dataclasses.fields(config)}
        assert fields["ppo"].default == default, config
        assert not set(fields) & set(PPO_FIELDS), config  # no second declaration


def test_the_users_keep_their_former_ppo_settings() -> None:
    """The values each user passed to stable-baselines3 before the settings were one class."""
    assert CONTROLLER_PPO.sb3_kwargs() == {
        **PPOSettings().sb3_kwargs(),
        **{"n_steps": 256, "batch_size": 64, "n_epochs": 10, "learning_rate": 3e-4},
        **{"gamma": 0.98, "gae_lambda": 0.95, "ent_coef": 0.0},
    }
    assert JUDGE_RL_PPO.sb3_kwargs() == {
        **PPOSettings().sb3_kwargs(),
        **{"n_steps": 256, "batch_size": 256, "gamma": 0.99},
    }
    assert SHIELD_PPO.sb3_kwargs() == {
        **PPOSettings().sb3_kwargs(),
        **{"n_steps": 1024, "batch_size": 64, "n_epochs": 10, "learning_rate": 3e-4},
        "gamma": 0.99,
    }
    assert REPPO_PPO.sb3_kwargs() == {
        **PPOSettings().sb3_kwargs(),
        **{"n_steps": 128, "batch_size": 256, "n_epochs": 3, "learning_rate": 3e-4},
        **{"gamma": 0.99, "gae_lambda": 0.95, "ent_coef": 0.0},
    }
    smoke = JUDGE_BUDGETS["smoke"]["ppo"]
    assert (smoke.n_steps, smoke.batch_size, smoke.gamma) == (128, 64, 0.99)


def test_budget_presets_and_given_options_merge_field_by_field() -> None:
    cfg = ShieldExperimentConfig.for_budget("smoke", ppo={"batch_size": 32})
    assert (cfg.ppo.n_steps, cfg.ppo.n_epochs, cfg.ppo.batch_size) == (512, 2, 32)
    assert cfg.ppo.learning_rate == SHIELD_PPO.learning_rate
    assert ShieldExperimentConfig.for_budget("cpu").ppo == SHIELD_PPO
    reppo = RePPOExperimentConfig.for_budget("smoke", ppo={"ent_coef": 0.01})
    assert (reppo.ppo.n_steps, reppo.ppo.n_epochs, reppo.ppo.ent_coef) == (64, 1, 0.01)
    merged = merge_ppo_layers(JUDGE_RL_PPO, {"seeds": 2}, {"ppo": {"gamma": 0.9}})
    assert merged == {"seeds": 2, "ppo": dataclasses.replace(JUDGE_RL_PPO, gamma=0.9)}
    assert merge_ppo_layers(JUDGE_RL_PPO, {"seeds": 2}) == {"seeds": 2}


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"n_steps": 0}, "PPO: n_steps=0 must be >= 1"),
        ({"gamma": 1.5}, "PPO: gamma=1.5 must be <= 1"),
        ({"learning_rate": -1.0}, "PPO: learning_rate=-1.0 must be > 0"),
        ({"ent_coef": -0.1}, "PPO: ent_coef=-0.1 must be >= 0"),
    ],
)
def test_bad_ppo_settings_name_the_field(fields: dict[str, float], named: str) -> None:
    with pytest.raises(ConfigError, match=named.replace("(", r"\(").replace("]", r"\]")):
        PPOSettings(**fields)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="ppo.batch_size=512 > n_steps 256"):
        RLTrainSettings(ppo=dataclasses.replace(CONTROLLER_PPO, batch_size=512))
    with pytest.raises(ConfigError, match=r"unknown PPO setting\(s\) \['lr'\]"):
        merge_ppo_layers(SHIELD_PPO, {"ppo": {"lr": 1e-3}})
