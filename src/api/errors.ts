// Every error leaves the server in OpenAI's shape: {"error":{"message","type","param","code"}}.

export type ErrorType =
  | "invalid_request_error"
  | "authentication_error"
  | "permission_error"
  | "not_found_error"
  | "rate_limit_error"
  | "insufficient_quota"
  | "server_error"
  | "service_unavailable";

export class ApiError extends Error {
  constructor(
    readonly status: number,
    message: string,
    readonly type: ErrorType,
    readonly param: string | null = null,
    readonly code: string | null = null,
    readonly headers: Record<string, string> = {},
  ) {
    super(message);
    this.name = "ApiError";
  }

  body() {
    return { error: { message: this.message, type: this.type, param: this.param, code: this.code } };
  }

  toResponse(extraHeaders: Record<string, string> = {}): Response {
    return Response.json(this.body(), {
      status: this.status,
      headers: { ...this.headers, ...extraHeaders },
    });
  }
}

export const badRequest = (message: string, param: string | null = null, code: string | null = null) =>
  new ApiError(400, message, "invalid_request_error", param, code);

export const invalidApiKey = (message: string) =>
  new ApiError(401, message, "invalid_request_error", null, "invalid_api_key");

export const modelNotFound = (id: string) =>
  new ApiError(
    404,
    `The model '${id}' does not exist or you do not have access to it.`,
    "invalid_request_error",
    "model",
    "model_not_found",
  );

export const internalError = () =>
  new ApiError(500, "The server had an error while processing your request.", "server_error", null, null);

/** The store's database cannot be reached: the client may retry shortly (the database may be restarting). */
export const storeUnavailable = () =>
  new ApiError(503, "The server cannot reach its database right now; retry shortly.", "service_unavailable", null, "database_unavailable", {
    "retry-after": "1",
  });
