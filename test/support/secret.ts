/** The HS256 secret of every service a test or the soak starts, so that they can mint its tokens. */
export const testSecret = 'test-secret-that-is-long-enough-for-hs256!';
