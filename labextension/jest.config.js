// Jest runs the pure model and formatting code (no JupyterLab runtime needed) through ts-jest.
module.exports = {
  testEnvironment: 'node',
  roots: ['<rootDir>/src'],
  testMatch: ['**/__tests__/**/*.spec.ts'],
  transform: {
    '^.+\\.ts$': ['ts-jest', { tsconfig: { module: 'commonjs', types: ['jest'], isolatedModules: true } }]
  }
};
