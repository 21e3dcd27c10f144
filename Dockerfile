# syntax=docker/dockerfile:1

# Build: all dependencies (TypeScript is a devDependency), compile src/ to dist/.
FROM node:24-bookworm-slim AS build
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci
COPY tsconfig.json tsconfig.build.json ./
COPY src ./src
RUN npm run build

# Runtime: production dependencies and the compiled JavaScript only (tsx is a devDependency,
# so the image runs dist/, never src/). Debian rather than Alpine: embedded-postgres, a runtime
# dependency used only without DATABASE_URL, ships glibc binaries.
FROM node:24-bookworm-slim AS runtime
ENV NODE_ENV=production \
    HOST=0.0.0.0 \
    PORT=8080
WORKDIR /app
COPY package.json package-lock.json ./
RUN npm ci --omit=dev && npm cache clean --force
COPY --from=build /app/dist ./dist
USER node
EXPOSE 8080
CMD ["node", "--max-semi-space-size=32", "dist/main.js"]
