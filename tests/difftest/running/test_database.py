"""The example database of a campaign: each cell has its own key, a run seed does not switch the database off,
and the key of a cell is the same in every process (what a shared database, directory or Redis, relies on)."""

import subprocess
import sys

from hypothesis.database import InMemoryExampleDatabase

from difftest.checking import interface
from difftest.model import presets, strategies
from difftest.running import campaign


class Recording(InMemoryExampleDatabase):
    def __init__(self):
        super().__init__()
        self.keys = set()

    def save(self, key, value):
        self.keys.add(key)
        super().save(key, value)

    def fetch(self, key):
        self.keys.add(key)
        yield from super().fetch(key)


def primary_keys(db):
    return {k for k in db.keys if not k.endswith((b".secondary", b".pareto"))}


def fuzz(db, op, configs, run_seed=3):
    settings = campaign.cli_settings(3).__class__(campaign.cli_settings(3), database=db)
    return campaign.fuzz_cell(interface.load("torch"), "torch", op, configs=configs, hypothesis_settings=settings,
                              run_seed=run_seed)


def test_each_cell_has_its_own_database_key_and_a_seed_keeps_the_database():
    db = Recording()
    fuzz(db, "routing", strategies.routing_configs(method="renormalize"))
    assert len(primary_keys(db)) == 1, "a seeded run used no database"
    fuzz(db, "routing", strategies.routing_configs(method="renormalize"), run_seed=4)
    assert len(primary_keys(db)) == 1, "the same cell under another seed took another key"
    fuzz(db, "routing", strategies.routing_configs(method="deepseek_v3"))
    fuzz(db, "routing", presets.configs("deepseek-v3", "routing"))
    assert len(primary_keys(db)) == 3, "cells share a database key"


def test_a_cells_key_is_the_same_in_another_process():
    code = ("from tests.difftest.running.test_database import *; db = Recording(); "
            "fuzz(db, 'routing', strategies.routing_configs(method='renormalize')); "
            "print(primary_keys(db).pop().hex())")
    keys = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
            for _ in range(2)}
    db = Recording()
    fuzz(db, "routing", strategies.routing_configs(method="renormalize"))
    assert keys == {primary_keys(db).pop().hex() + "\n"}
