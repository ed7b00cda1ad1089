"""Everything that speaks to AWS: boto3 clients (``clients``), the Secrets Manager adapter
(``secrets``, which turns ``ClientError`` into the project's errors), the two secrets' documents,
the vault that reads and writes them with merges and retries (``vault``), EventBridge
notifications; for the re-authorization links, their table (``link_state``), the stack's other
functions (``functions``) and its SNS topic (``topic``); for the consumer
helper, where a secret is (``secret_lookup``) and its refresh requests (``refresh_requests``).

Imports ``core`` only (and boto3, on first use).
"""
