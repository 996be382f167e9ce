"""The README's recipes for secured clusters hold: each Python form is run against the
secured broker's listener of the same protocol and mechanism (with the test's broker,
CA and credentials in place of the cloud's), what it wrote read back by confluent-kafka;
each Java-properties form is read as netkafka-perf reads it and passes every check of
Producer() with the same protocol and mechanism.  MSK IAM and Kerberos cannot meet their
servers here: their forms are checked as the Producer is built."""
import re
from pathlib import Path

import pytest

from netkafka import Producer
from netkafka.config import ProducerConfig, producer_setting
from netkafka.testing.reader import read_topic
from netkafka.testing.admin import create_topic
from netkafka.tools.perf import read_properties

README = Path(__file__).resolve().parents[1] / "README.md"
SECTION = "Connecting to a secured cluster"
# Recipe title -> the secured broker's listener with its protocol and mechanism (None:
# its server cannot be reached from here).
RECIPES = {"Confluent Cloud": "SASL_SSL_PLAIN", "Amazon MSK with SCRAM": "SASL_SSL_SCRAM_SHA_512",
           "Aiven": "MTLS", "Amazon MSK with IAM": None, "Kerberos": None}
# MSK IAM's token provider is a Python object: no properties form (the README says so).
WITH_PROPERTIES = [title for title in RECIPES if title != "Amazon MSK with IAM"]


def recipes():
    """title -> {"python": code, "properties": text or None} of the README section."""
    text = README.read_text(encoding="utf-8")
    body = text.split(f"\n## {SECTION}\n", 1)[1].split("\n## ", 1)[0]
    found = {}
    for chunk in body.split("\n**")[1:]:
        title = chunk.split("**", 1)[0]
        blocks = {}
        for kind, code in re.findall(r"```(python|properties)\n(.*?)```", chunk, re.S):
            blocks.setdefault(kind, code)  # the recipe's own: the first of each kind
        found[title] = {"python": blocks.get("python"), "properties": blocks.get("properties")}
    return found


def recipe_kwargs(code):
    """The keyword arguments the recipe's Producer(...) call passes."""
    captured = []
    exec(compile(code, "README.md", "exec"), {"Producer": lambda **kwargs: captured.append(kwargs)})
    [kwargs] = captured
    return kwargs


def test_every_recipe_is_there():
    found = recipes()
    assert set(RECIPES) <= set(found), found.keys()
    assert all(found[title]["python"] for title in RECIPES)
    assert all(found[title]["properties"] for title in WITH_PROPERTIES)


@pytest.mark.parametrize("title", [title for title, listener in RECIPES.items() if listener])
def test_python_recipe_writes_to_the_listener_it_is_for(secured_broker, topic_name, title):
    spec = secured_broker.listeners[RECIPES[title]]
    kwargs = recipe_kwargs(recipes()[title]["python"])
    assert (kwargs["security_protocol"], kwargs.get("sasl_mechanism")) == (
        spec.security_protocol, spec.sasl_mechanism)
    alice = secured_broker.client_certs["alice"]
    ours = {"sasl_plain_username": "alice",
            "sasl_plain_password": secured_broker.passwords.get(spec.sasl_mechanism, {}).get("alice"),
            "ssl_cafile": str(secured_broker.ca_file), "ssl_certfile": str(alice.cert_file),
            "ssl_keyfile": str(alice.key_file)}
    # The clouds' brokers are trusted by the system's CAs; this one by the test CA.
    settings = {**{name: ours.get(name, value) for name, value in kwargs.items()},
                "bootstrap_servers": spec.bootstrap, "ssl_cafile": str(secured_broker.ca_file)}
    reader = secured_broker.client_config(spec.name, "bob")
    create_topic(spec.bootstrap, topic_name, client_config=reader)
    with Producer(**settings) as producer:
        producer.send(topic_name, b"recipe", b"k").get(60)
    [record] = read_topic(spec.bootstrap, topic_name, 1, client_config=reader)
    assert (record.key, record.value) == (b"k", b"recipe")


@pytest.mark.parametrize("title", WITH_PROPERTIES)
def test_properties_recipe_passes_the_producers_checks(secured_broker, tmp_path, monkeypatch,
                                                       title):
    recipe = recipes()[title]
    # The files the recipes name, in the directory they are named relative to.
    alice = secured_broker.client_certs["alice"]
    (tmp_path / "ca.pem").write_bytes(secured_broker.ca_file.read_bytes())
    (tmp_path / "service.cert").write_bytes(alice.cert_file.read_bytes())
    (tmp_path / "service.key").write_bytes(alice.key_file.read_bytes())
    (tmp_path / "service.pem").write_bytes(alice.key_file.read_bytes() + alice.cert_file.read_bytes())
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "client.properties"
    path.write_text(recipe["properties"])
    settings = {"bootstrap_servers": "broker:9093"}
    for name, text in read_properties(path):
        settings.update(producer_setting(name, text))
    config = ProducerConfig.from_kwargs(settings)
    kwargs = recipe_kwargs(recipe["python"])
    assert (config.security_protocol, config.security.get("sasl_mechanism")) == (
        kwargs["security_protocol"], kwargs.get("sasl_mechanism"))
    ProducerConfig.from_kwargs(kwargs)


@pytest.mark.parametrize("title", [title for title, listener in RECIPES.items() if not listener])
def test_python_recipe_without_a_server_here_passes_the_producers_checks(title):
    # MSK IAM: AWS's signer is loaded and the region taken; Kerberos: the gssapi library.
    config = ProducerConfig.from_kwargs(recipe_kwargs(recipes()[title]["python"]))
    assert config.security_protocol == "SASL_SSL"
