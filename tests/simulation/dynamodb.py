"""DynamoDB in memory: the item calls the links' table adapter (``cmstoken.aws.link_state``)
makes, with DynamoDB's semantics for them.

``DynamoDBModel`` stands in for a boto3 ``dynamodb`` client and implements ``create_table``,
``get_item``, ``put_item``, ``update_item``, ``delete_item`` and ``scan`` on tables with one
string hash key:

- a write's ``ConditionExpression`` is evaluated against the item as it is, atomically with the
  write; refused, it raises ``ConditionalCheckFailedException`` and changes nothing;
- expressions are parsed for the subset the product writes (``attribute_exists``,
  ``attribute_not_exists``, comparisons, ``AND``/``OR``/``NOT``, parentheses; ``SET a = v``,
  ``ADD a n``, ``REMOVE a``), names through ``ExpressionAttributeNames`` and values through
  ``ExpressionAttributeValues``; anything else, an undefined name or value, or one defined
  and unused, is a ``ValidationException`` as DynamoDB answers it;
- comparisons of numbers are numeric, of strings by code point; a missing attribute or values
  of different types compare false;
- the time-to-live attribute is kept as data: DynamoDB deletes expired items only eventually,
  so nothing here expires (the adapter's conditions compare the times themselves).

Every call runs through ``interceptor`` as ``("dynamodb", "<Operation>:<key>")``, so a
scheduler sees which item a step touches. ``tests/integration/test_simulation_conformance.py``
keeps the model equal to moto's server under the real adapter.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from decimal import Decimal
from typing import Any, cast

from botocore.exceptions import ClientError

from simulation.interception import Interceptor, direct

# The methods keep boto3's parameter names (TableName, ...): callers pass them as keywords.
# ruff: noqa: N803

Item = dict[str, dict[str, str]]
_TOKEN = re.compile(r"\s*(<>|<=|>=|[=<>(),+]|[#:]?[A-Za-z_][A-Za-z0-9_]*)")
_COMPARE: dict[str, Callable[[Any, Any], bool]] = {
    "=": lambda a, b: bool(a == b),
    "<>": lambda a, b: bool(a != b),
    "<": lambda a, b: bool(a < b),
    "<=": lambda a, b: bool(a <= b),
    ">": lambda a, b: bool(a > b),
    ">=": lambda a, b: bool(a >= b),
}


def _error(code: str, message: str, operation: str, status: int = 400) -> ClientError:
    response: Any = {
        "Error": {"Code": code, "Message": message},
        "ResponseMetadata": {"HTTPStatusCode": status},
    }
    return ClientError(response, operation)


class _Expression:
    """One expression's tokens, with the names and values it may use (and which it did)."""

    def __init__(
        self, text: str, names: dict[str, str], values: dict[str, Any], operation: str
    ) -> None:
        self.tokens = _tokens(text, operation)
        self.names, self.values, self.operation = names, values, operation
        self.used_names: set[str] = set()
        self.used_values: set[str] = set()
        self.position = 0

    def invalid(self, message: str) -> ClientError:
        return _error("ValidationException", message, self.operation)

    def peek(self) -> str | None:
        return self.tokens[self.position] if self.position < len(self.tokens) else None

    def take(self, expected: str | None = None) -> str:
        token = self.peek()
        if token is None or (expected is not None and token.upper() != expected):
            raise self.invalid(f"Invalid expression: expected {expected or 'more'} near {token}")
        self.position += 1
        return token

    def end(self) -> None:
        if self.peek() is not None:
            raise self.invalid(f"Invalid expression: unexpected {self.peek()}")

    def path(self) -> str:
        token = self.take()
        if token.startswith("#"):
            if token not in self.names:
                raise self.invalid(f"An expression attribute name used is not defined: {token}")
            self.used_names.add(token)
            return self.names[token]
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token) or token.upper() in _KEYWORDS:
            raise self.invalid(f"Invalid expression: {token} is not an attribute path")
        return token

    def value(self) -> dict[str, str]:
        token = self.take()
        if not token.startswith(":"):
            raise self.invalid(f"Invalid expression: expected a value near {token}")
        if token not in self.values:
            raise self.invalid(f"An expression attribute value used is not defined: {token}")
        self.used_values.add(token)
        return dict(self.values[token])

    def operand(self, item: Item) -> dict[str, str] | None:
        token = self.peek() or ""
        return self.value() if token.startswith(":") else item.get(self.path())

    def check_all_used(self) -> None:
        unused_names = set(self.names) - self.used_names
        if unused_names:
            raise self.invalid(
                "Value provided in ExpressionAttributeNames unused in expressions: keys: "
                f"{{{', '.join(sorted(unused_names))}}}"
            )
        unused_values = set(self.values) - self.used_values
        if unused_values:
            raise self.invalid(
                "Value provided in ExpressionAttributeValues unused in expressions: keys: "
                f"{{{', '.join(sorted(unused_values))}}}"
            )


_KEYWORDS = frozenset({"AND", "OR", "NOT", "SET", "ADD", "REMOVE", "DELETE"})


def _tokens(text: str, operation: str) -> list[str]:
    tokens, position = [], 0
    while position < len(text.rstrip()):
        match = _TOKEN.match(text, position)
        if match is None:
            raise _error(
                "ValidationException",
                f"Invalid expression: unexpected character near {text[position:][:10]!r}",
                operation,
            )
        tokens.append(match.group(1))
        position = match.end()
    return tokens


def _comparable(value: dict[str, str] | None) -> tuple[str, Any] | None:
    if value is None:
        return None
    (kind, raw), *_ = value.items()
    return kind, Decimal(raw) if kind == "N" else raw


# --- conditions ---------------------------------------------------------------------------


def _condition(expression: _Expression, item: Item) -> bool:
    result = _and(expression, item)
    while (expression.peek() or "").upper() == "OR":
        expression.take()
        right = _and(expression, item)
        result = result or right
    return result


def _and(expression: _Expression, item: Item) -> bool:
    result = _unary(expression, item)
    while (expression.peek() or "").upper() == "AND":
        expression.take()
        right = _unary(expression, item)
        result = result and right
    return result


def _unary(expression: _Expression, item: Item) -> bool:
    token = expression.peek() or ""
    if token.upper() == "NOT":
        expression.take()
        return not _unary(expression, item)
    if token == "(":
        expression.take()
        result = _condition(expression, item)
        expression.take(")")
        return result
    if token in ("attribute_exists", "attribute_not_exists"):
        expression.take()
        expression.take("(")
        name = expression.path()
        expression.take(")")
        return (name in item) == (token == "attribute_exists")
    left = _comparable(expression.operand(item))
    operator = expression.take()
    if operator not in _COMPARE:
        raise expression.invalid(f"Invalid expression: unknown operator {operator}")
    right = _comparable(expression.operand(item))
    if left is None or right is None or left[0] != right[0]:
        return False
    return _COMPARE[operator](left[1], right[1])


# --- updates ------------------------------------------------------------------------------


def _update(expression: _Expression, item: Item) -> Item:
    updated = copy.deepcopy(item)
    seen: set[str] = set()
    while expression.peek() is not None:
        clause = expression.take().upper()
        if clause not in ("SET", "ADD", "REMOVE") or clause in seen:
            raise expression.invalid(f"Invalid UpdateExpression: unexpected {clause}")
        seen.add(clause)
        while True:
            _action(clause, expression, item, updated)
            if expression.peek() != ",":
                break
            expression.take()
    if not seen:
        raise expression.invalid("Invalid UpdateExpression: The expression can not be empty;")
    return updated


def _action(clause: str, expression: _Expression, item: Item, updated: Item) -> None:
    name = expression.path()
    if clause == "REMOVE":
        updated.pop(name, None)
    elif clause == "SET":
        expression.take("=")
        value = expression.operand(item)
        if value is None:
            raise expression.invalid(
                "The provided expression refers to an attribute that does not exist in the item"
            )
        updated[name] = value
    else:
        value = expression.value()
        current = item.get(name)
        if "N" not in value or (current is not None and "N" not in current):
            raise expression.invalid(
                "Invalid UpdateExpression: Incorrect operand type for operator or function; "
                "operator: ADD"
            )
        total = Decimal(value["N"]) + (Decimal(current["N"]) if current else Decimal(0))
        updated[name] = {"N": str(total)}


class DynamoDBModel:
    """The tables (see the module docstring); ``calls`` logs ``(operation, key)``."""

    def __init__(self, interceptor: Interceptor = direct) -> None:
        self.interceptor = interceptor
        self.tables: dict[str, tuple[str, dict[str, Item]]] = {}  # name: (hash key, items)
        self.calls: list[tuple[str, str]] = []

    def create_table(
        self, *, TableName: str, KeySchema: list[dict[str, str]], **_: Any
    ) -> dict[str, Any]:
        (key,) = (k["AttributeName"] for k in KeySchema if k["KeyType"] == "HASH")
        self.tables[TableName] = (key, {})
        return {"TableDescription": {"TableName": TableName, "TableStatus": "ACTIVE"}}

    def scan(self, *, TableName: str) -> dict[str, Any]:
        _, items = self._table(TableName, "Scan")
        return {"Items": [copy.deepcopy(i) for i in items.values()], "Count": len(items)}

    def get_item(
        self, *, TableName: str, Key: Item, ConsistentRead: bool = False
    ) -> dict[str, Any]:
        def act() -> dict[str, Any]:
            items, key = self._items(TableName, Key, "GetItem")
            return {"Item": copy.deepcopy(items[key])} if key in items else {}

        return self._call(TableName, "GetItem", Key, act)

    def put_item(self, *, TableName: str, Item: Item, **conditions: Any) -> dict[str, Any]:
        def act() -> dict[str, Any]:
            items, key = self._items(TableName, Item, "PutItem")
            self._check(conditions, items.get(key, {}), "PutItem", updating=False)
            items[key] = copy.deepcopy(Item)
            return {}

        return self._call(TableName, "PutItem", Item, act)

    def update_item(
        self, *, TableName: str, Key: Item, UpdateExpression: str, **conditions: Any
    ) -> dict[str, Any]:
        def act() -> dict[str, Any]:
            items, key = self._items(TableName, Key, "UpdateItem")
            current = items.get(key, {})
            update = self._check(
                conditions, current, "UpdateItem", updating=True, update=UpdateExpression
            )
            assert update is not None
            items[key] = {**update, **copy.deepcopy(Key)}
            return {}

        return self._call(TableName, "UpdateItem", Key, act)

    def delete_item(self, *, TableName: str, Key: Item, **conditions: Any) -> dict[str, Any]:
        def act() -> dict[str, Any]:
            items, key = self._items(TableName, Key, "DeleteItem")
            self._check(conditions, items.get(key, {}), "DeleteItem", updating=False)
            items.pop(key, None)
            return {}

        return self._call(TableName, "DeleteItem", Key, act)

    # --- helpers ------------------------------------------------------------------------------

    def _call(
        self, table: str, operation: str, key: Item, act: Callable[[], dict[str, Any]]
    ) -> dict[str, Any]:
        hash_key = self.tables[table][0] if table in self.tables else ""
        value = key.get(hash_key, {}).get("S", "")
        self.calls.append((operation, value))
        return cast(dict[str, Any], self.interceptor("dynamodb", f"{operation}:{value}", act))

    def _table(self, name: str, operation: str) -> tuple[str, dict[str, Item]]:
        if name not in self.tables:
            raise _error("ResourceNotFoundException", "Requested resource not found", operation)
        return self.tables[name]

    def _items(self, name: str, key: Item, operation: str) -> tuple[dict[str, Item], str]:
        hash_key, items = self._table(name, operation)
        value = key.get(hash_key, {}).get("S")
        if value is None:
            raise _error(
                "ValidationException",
                "The provided key element does not match the schema",
                operation,
            )
        return items, value

    def _check(
        self,
        conditions: dict[str, Any],
        item: Item,
        operation: str,
        *,
        updating: bool,
        update: str | None = None,
    ) -> Item | None:
        """Evaluate the condition (and parse the update) with one set of names and values, so
        that what neither uses is refused; the updated item, or ``None`` when not updating."""
        names = conditions.get("ExpressionAttributeNames") or {}
        values = conditions.get("ExpressionAttributeValues") or {}
        text = conditions.get("ConditionExpression")
        updated = None
        checks: list[_Expression] = []
        if update is not None:
            expression = _Expression(update, names, values, operation)
            updated = _update(expression, item)
            expression.end()
            checks.append(expression)
        holds = True
        if text is not None:
            expression = _Expression(text, names, values, operation)
            holds = _condition(expression, item)
            expression.end()
            checks.append(expression)
        combined = _Expression("", names, values, operation)
        for done in checks:
            combined.used_names |= done.used_names
            combined.used_values |= done.used_values
        combined.check_all_used()
        if not holds:
            raise _error(
                "ConditionalCheckFailedException", "The conditional request failed", operation
            )
        return updated if updating else None
