/**
 * One step of the database's schema. Steps are applied once each, in version order, and never
 * changed once released: a change to a table is a new step. The first steps use IF NOT EXISTS
 * because databases created before versioned migrations already hold their tables.
 */
export type Migration = {
  version: number;
  name: string;
  /** The event store's tables exist only where events are kept in PostgreSQL. */
  when: 'always' | 'events in PostgreSQL';
  sql: string;
};
