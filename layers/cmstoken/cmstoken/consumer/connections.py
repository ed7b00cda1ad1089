"""A provider's AWS clients, made once, on first use, from a boto3 session of its own (or the
clients the workload gave): a ``SecretStore`` for each region read, the EventBridge client in the
bus's region, and where to read (``regions.Targets``, decided from the caller's region)."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from cmstoken.aws import clients
from cmstoken.aws.refresh_requests import bus_region
from cmstoken.consumer.reading import read_document
from cmstoken.consumer.regions import Target, Targets

if TYPE_CHECKING:
    from mypy_boto3_events import EventBridgeClient
    from mypy_boto3_secretsmanager import SecretsManagerClient

    from cmstoken.aws.documents import ServiceTokenDocument
    from cmstoken.aws.secrets import SecretStore
    from cmstoken.core.clock import Clock


class Connections:
    """The clients of one provider of ``secret_id``. Thread-safe."""

    def __init__(
        self,
        secret_id: str,
        replica_regions: tuple[str, ...],
        event_bus: str | None,
        clock: Clock,
        *,
        secrets_client: SecretsManagerClient | None,
        events_client: EventBridgeClient | None,
    ) -> None:
        self._secret_id = secret_id
        self._replica_regions = replica_regions
        self._event_bus = event_bus
        self._clock = clock
        self._secrets_client = secrets_client
        self._events_client = events_client
        self._session: Any = None
        self._stores: dict[str | None, SecretStore] = {}
        self._targets: Targets | None = None
        self._lock = threading.Lock()  # the session, the clients and the targets

    @property
    def secrets_client(self) -> SecretsManagerClient:
        """The Secrets Manager client of the first place read."""
        return self.store(self.targets().order()[0]).client

    @property
    def events_client(self) -> EventBridgeClient:
        """The EventBridge client, in the bus ARN's region."""
        client = self._events_client
        if client is None:
            with self._lock:
                if self._events_client is None:
                    region = bus_region(self._event_bus)
                    self._events_client = self._new_client("events", region)
                client = self._events_client
        return client

    def targets(self) -> Targets:
        """Where to read: decided on first use, from the caller's region."""
        targets = self._targets
        if targets is None:
            with self._lock:
                if self._targets is None:
                    self._targets = Targets(
                        self._secret_id, self._replica_regions, self._caller_region(), self._clock
                    )
                targets = self._targets
        return targets

    def store(self, target: Target) -> SecretStore:
        """The store that reads ``target``: the given client's, else one in its region."""
        region = None if self._secrets_client is not None else target.region
        store = self._stores.get(region)
        if store is None:
            with self._lock:
                if region not in self._stores:
                    from cmstoken.aws.secrets import SecretStore

                    client = self._secrets_client or self._new_client("secretsmanager", region)
                    self._stores[region] = SecretStore(client)
                store = self._stores[region]
        return store

    def read_at(self, target: Target) -> ServiceTokenDocument:
        """The document at ``target``, read now."""
        return read_document(self.store(target), target.secret_id, self._session)

    def _caller_region(self) -> str | None:
        """The given client's region, else the session's (the caller holds the lock)."""
        if self._secrets_client is not None:
            return self._secrets_client.meta.region_name
        return self._boto3_session().region_name  # type: ignore[no-any-return]

    def _boto3_session(self) -> Any:
        """The provider's boto3 session (the caller holds the lock)."""
        if self._session is None:
            self._session = clients.session()
        return self._session

    def _new_client(self, service_name: str, region: str | None) -> Any:
        """A client from the provider's session (the caller holds the lock)."""
        return clients.client(service_name, session=self._boto3_session(), region_name=region)
