// The admin API's requests and answers as TypeBox schemas: what the handler validates bodies
// against and what /admin/v1/openapi.json publishes, from the same objects.
import { Type as T, type TSchema } from "@sinclair/typebox";

const Nullable = <S extends TSchema>(s: S) => T.Union([s, T.Null()]);
const Period = T.Union([T.Literal("day"), T.Literal("month"), T.Literal("total")], { description: "UTC day, UTC month, or in total" });
const Plan = T.Union([T.Literal("prepaid"), T.Literal("unlimited")]);
const Usd = T.Number({ exclusiveMinimum: 0, maximum: 1e9, description: "USD" });
const Limit = Nullable(T.Integer({ minimum: 1, maximum: 1e12 }));

export const ErrorBody = T.Object(
  { error: T.Object({ message: T.String(), type: T.String(), param: Nullable(T.String()), code: Nullable(T.String()) }) },
  { description: "OpenAI's error shape, as /v1 answers" },
);

export const Account = T.Object({
  name: T.String(),
  plan: Plan,
  balance_usd: Nullable(T.Number({ description: "null on the unlimited plan" })),
  priority: T.Integer(),
  model_access: T.Union([T.Literal("all"), T.Literal("listed")]),
  models: Nullable(T.Array(T.String(), { description: "the models granted when model_access is listed" })),
  user_budget_usd: Nullable(T.Number()),
  user_budget_period: Nullable(Period),
  created_at: T.Integer({ description: "ms since the epoch" }),
});

export const AccountCreate = T.Object(
  {
    name: T.String({ pattern: "^[a-z0-9][a-z0-9._-]{0,63}$" }),
    plan: T.Optional(Plan),
    priority: T.Optional(T.Integer({ minimum: -100, maximum: 100 })),
    user_budget_usd: T.Optional(Nullable(Usd)),
    user_budget_period: T.Optional(Period),
  },
  { additionalProperties: false },
);

export const AccountUpdate = T.Object(
  {
    plan: T.Optional(Plan),
    priority: T.Optional(T.Integer({ minimum: -100, maximum: 100 })),
    user_budget_usd: T.Optional(Nullable(Usd)),
    user_budget_period: T.Optional(Period),
  },
  { additionalProperties: false },
);

export const TopUp = T.Object({ usd: Usd, note: T.Optional(T.String({ maxLength: 200 })) }, { additionalProperties: false });

export const Credit = T.Object({
  account: T.String(),
  plan: Plan,
  balance_usd: T.Number(),
  history: T.Array(
    T.Object({ id: T.Integer(), kind: T.Union([T.Literal("charge"), T.Literal("topup")]), amount_usd: T.Number(), request_id: Nullable(T.String()), model: Nullable(T.String()), note: Nullable(T.String()), created_at: T.Integer() }),
  ),
});

export const ModelAccess = T.Object({ all: T.Boolean({ description: "every served model, present and future" }), models: T.Array(T.String()) });
export const ModelAccessSet = T.Union([T.Object({ all: T.Literal(true) }, { additionalProperties: false }), T.Object({ models: T.Array(T.String({ minLength: 1 })) }, { additionalProperties: false })]);

export const Key = T.Object({
  id: T.String(),
  account: T.String(),
  label: Nullable(T.String()),
  prefix: T.String({ description: "the key's first characters, for recognising it" }),
  budget_usd: Nullable(T.Number()),
  budget_period: Nullable(Period),
  spent_usd: Nullable(T.Number({ description: "spent in the budget's current period" })),
  expires_at: Nullable(T.Integer()),
  models: Nullable(T.Array(T.String())),
  created_at: T.Integer(),
  last_used_at: Nullable(T.Integer()),
  revoked_at: Nullable(T.Integer()),
});

export const KeyCreated = T.Composite([Key, T.Object({ key: T.String({ description: "the key itself: shown only in this answer" }) })]);

const keyLimitFields = {
  label: T.Optional(Nullable(T.String({ maxLength: 80 }))),
  budget_usd: T.Optional(Nullable(Usd)),
  budget_period: T.Optional(Period),
  expires: T.Optional(Nullable(T.String({ description: "a duration from now (90m, 12h, 30d, 2w), a date (2027-01-31: through that UTC day) or a date-time with a zone; null: never" }))),
  models: T.Optional(Nullable(T.Array(T.String({ minLength: 1 }), { minItems: 1, description: "the only models the key may use; null: all of its account's" }))),
};

export const KeyCreate = T.Object({ account: T.String(), ...keyLimitFields }, { additionalProperties: false });
export const KeyUpdate = T.Object(keyLimitFields, { additionalProperties: false });

export const RateLimitEntry = T.Object({
  account: T.String(),
  key: Nullable(T.String()),
  model: Nullable(T.String()),
  rpm: Limit,
  tpm: Limit,
  concurrent: Limit,
});

export const RateLimitSet = T.Object(
  {
    account: T.String(),
    key: T.Optional(Nullable(T.String({ description: "a key of the account: limits for that key only" }))),
    model: T.Optional(Nullable(T.String({ description: "a model: limits for its requests only" }))),
    rpm: T.Optional(Limit),
    tpm: T.Optional(Limit),
    concurrent: T.Optional(Limit),
  },
  { additionalProperties: false, description: "Absent limits stay as they are; null removes one." },
);

export const Model = T.Object({
  id: T.String(),
  status: T.Union([T.Literal("active"), T.Literal("inactive")]),
  served: T.Boolean(),
  context_length: T.Integer(),
  input_per_mtok: T.Number(),
  cached_input_per_mtok: Nullable(T.Number()),
  output_per_mtok: T.Number(),
  keep_alive_seconds: Nullable(T.Integer()),
  load_error: Nullable(T.String()),
});

export const Prices = T.Object(
  { input: T.Number({ minimum: 0 }), output: T.Number({ minimum: 0 }), cached_input: T.Optional(Nullable(T.Number({ minimum: 0 }))) },
  { additionalProperties: false, description: "USD per million tokens; cached_input null: the input price" },
);

export const ModelUpdate = T.Object(
  { status: T.Optional(T.Union([T.Literal("active"), T.Literal("inactive")])), keep_alive_seconds: T.Optional(Nullable(T.Integer({ minimum: -1 }))) },
  { additionalProperties: false },
);

export const Residency = T.Object({ model: T.String(), state: T.String(), bytes: T.Number() });

export const UsageReport = T.Object({
  account: T.String(),
  by: T.Union([T.Literal("key"), T.Literal("model"), T.Literal("user"), T.Literal("day")]),
  since: T.Integer(),
  until: T.Integer(),
  rows: T.Array(
    T.Object({
      group: Nullable(T.String({ description: "the key id, model id, end user (null: none named) or UTC day" })),
      requests: T.Integer(),
      prompt_tokens: T.Integer(),
      cached_tokens: T.Integer(),
      completion_tokens: T.Integer(),
      reasoning_tokens: T.Integer(),
      cost_usd: T.Number(),
    }),
  ),
});

export const AuditEntry = T.Object({
  seq: T.Integer(),
  at: T.Integer(),
  actor_kind: T.Union([T.Literal("cli"), T.Literal("workspace"), T.Literal("admin_api")]),
  actor: T.String(),
  source: Nullable(T.String()),
  action: T.String(),
  target: Nullable(T.String()),
  before: T.Unknown(),
  after: T.Unknown(),
  hash: T.String(),
});

export const AuditVerdict = T.Object({ ok: T.Boolean(), rows: T.Integer(), problem: T.Optional(T.String()) });

export const List = <S extends TSchema>(s: S) => T.Object({ object: T.Literal("list"), data: T.Array(s) });
