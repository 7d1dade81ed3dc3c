from .demo_shapes import DemoShapesDataset, generate_demo_shapes

__all__ = ['DemoShapesDataset', 'generate_demo_shapes']
