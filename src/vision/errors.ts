// An image part that cannot be used: the message says why, `param` names the part
// (`messages[i].content[j]`) so the API can answer 400 with it.
export class ImageInputError extends Error {
  constructor(
    message: string,
    readonly param: string | null = null,
  ) {
    super(message);
    this.name = "ImageInputError";
  }
}
