/**
 * Every PostgreSQL advisory lock the service takes, in one place, so that no two uses share a key.
 * The keys are arbitrary; they only have to stay the same across versions that run side by side.
 */
export const lockKeys = {
  /** Transaction lock: instances starting together apply migrations one at a time. */
  migration: 7_720_411_901,
  /** Session lock on the projector's connection: exactly one projector is active. */
  projector: 7_720_411_903,
  /** Session lock: one rebuild at a time. */
  rebuild: 7_720_411_904,
  /** Transaction lock: instances' integrity tree keepers take turns. */
  integrityTree: 7_720_411_905,
} as const;
