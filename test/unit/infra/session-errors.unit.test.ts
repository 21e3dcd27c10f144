import pg from 'pg';
import { describe, expect, it } from 'vitest';
import { isConnectionError, isConnectRefusal } from '../../../src/infra/postgres.js';

/** An error as pg builds it from a server's ErrorResponse, its severity in the server's language. */
function serverError(fields: { code: string; severity: string; routine: string; message: string }) {
  const error = new pg.DatabaseError(fields.message, fields.message.length, 'error');
  Object.assign(error, fields);
  return error;
}

describe('PostgreSQL errors that refuse or end a session', () => {
  // A German server (lc_messages = de_DE) names FATAL "SCHWERWIEGEND"; the routine stays English.
  it.each([
    ['55000', 'Datenbank »app« akzeptiert gegenwärtig keine Verbindungen'],
    ['42501', 'keine Berechtigung für Datenbank »app«'],
  ])('knows the session refusal %s from a server speaking another language', (code, message) => {
    const refusal = serverError({ code, severity: 'SCHWERWIEGEND', routine: 'CheckMyDatabase', message });
    expect(isConnectRefusal(refusal)).toBe(true);
    expect(isConnectionError(refusal)).toBe(true);
  });

  it('does not take the same codes raised by a statement for a refusal', () => {
    const statementError = serverError({
      code: '42501',
      severity: 'FEHLER',
      routine: 'aclcheck_error',
      message: 'keine Berechtigung für Tabelle t',
    });
    expect(isConnectRefusal(statementError)).toBe(false);
    expect(isConnectionError(statementError)).toBe(false);
  });

  it.each(['25P03', '57P04', '57P05'])('knows %s as the end of the session in any language', (code) => {
    const ended = serverError({ code, severity: 'SCHWERWIEGEND', routine: 'ProcessInterrupts', message: 'Verbindung wird abgebrochen' });
    expect(isConnectionError(ended)).toBe(true);
    expect(isConnectRefusal(ended)).toBe(false);
  });
});
