"""Replication to a Region that stops, on moto, as it does in AWS.

moto models a replica (``ReplicaSecret``) as a view of its primary: every read answers the
primary's versions, so a replica is never behind. When replication to a Region fails, AWS keeps
the versions already there ("If there are successfully replicated secret versions, they remain
in the replica Region until you explicitly remove them using the RemoveRegionsFromReplication
API operation", Secrets Manager User Guide, "Troubleshoot AWS Secrets Manager replication"), and
the primary's ``ReplicationStatus`` says ``Failed`` for that Region. ``stop_replication`` makes
moto's replica that: it keeps a copy of the versions it has now, and the primary's status for
its Region says ``Failed``. moto's backends are the process's own, in-process (``mock_aws``)
and behind the in-process server (``ThreadedMotoServer``) alike."""

from __future__ import annotations

import copy

from moto.secretsmanager.models import ReplicaSecret, secretsmanager_backends

# What the primary's ReplicationStatus says for the stopped Region.
STATUS_MESSAGE = "Replication failed: the replica's KMS key could not be used (test)"


def stop_replication(primary_arn: str, region: str) -> None:
    """From now on the replica of ``primary_arn`` in ``region`` keeps the versions it has."""
    account = primary_arn.split(":")[4]
    primary_region = primary_arn.split(":")[3]
    replica_arn = primary_arn.replace(f":{primary_region}:", f":{region}:", 1)
    replica = secretsmanager_backends[account][region].secrets[replica_arn]
    assert isinstance(replica, ReplicaSecret), f"no replica of {primary_arn} in {region}"
    kept = copy.copy(replica.source)
    kept.versions = copy.deepcopy(replica.source.versions)
    replica.source = kept
    replica.status, replica.message = "Failed", STATUS_MESSAGE
    replica.config.update(Status="Failed", StatusMessage=STATUS_MESSAGE)
