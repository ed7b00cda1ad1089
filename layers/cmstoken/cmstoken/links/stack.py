"""The stack a link, a page or a message is about, and the shapes of its parts."""

from __future__ import annotations

import re
from dataclasses import dataclass

STACK_NAME = re.compile(r"[A-Za-z][-A-Za-z0-9]{0,127}")  # CloudFormation's stack name rule
ACCOUNT = re.compile(r"[0-9]{12}")
# At most 20 characters (the longest AWS region has 14): a subject keeps it whole.
REGION = re.compile(r"(?=.{1,20}\Z)[a-z]{2,4}(?:-[a-z]{1,12}){1,3}-[0-9]{1,2}")


def check_form(pattern: re.Pattern[str], value: str, what: str) -> None:
    """``ValueError`` (naming ``what``, never the value) unless ``value`` has the form."""
    if not pattern.fullmatch(value):
        raise ValueError(f"{what} is not of the expected form")


@dataclass(frozen=True)
class Stack:
    """A deployed stack: its CloudFormation name, account id and region."""

    name: str
    account: str
    region: str

    def __post_init__(self) -> None:
        check_form(STACK_NAME, self.name, "stack name")
        check_form(ACCOUNT, self.account, "account id")
        check_form(REGION, self.region, "region")

    @property
    def bootstrap_command(self) -> str:
        """The fallback: re-authorize from a terminal with AWS credentials for the account."""
        return f"cmstoken-admin --stack {self.name} --region {self.region} bootstrap"
