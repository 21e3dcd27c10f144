/**
 * What a decision can refuse, in the domain's terms. The API's one error handler maps each to the
 * contract's code (src/api/errors.ts): a record that is not there to change is `not_found`, a value
 * the change cannot accept is a `validation_error` at `params.<field>`.
 */
export class DomainError extends Error {}

export type RecordKind = 'workspace' | 'solution';

export class RecordNotFound extends DomainError {
  constructor(readonly record: RecordKind) {
    super(`${record} not found`);
    this.name = 'RecordNotFound';
  }
}

/** A creation found its new id already taken by a different record: ids are random or derived, so this is a bug. */
export class RecordIdTaken extends DomainError {
  constructor(readonly record: RecordKind) {
    super(`generated ${record} id already exists`);
    this.name = 'RecordIdTaken';
  }
}

export class InvalidValue extends DomainError {
  constructor(
    readonly field: string,
    message: string,
  ) {
    super(message);
    this.name = 'InvalidValue';
  }
}
